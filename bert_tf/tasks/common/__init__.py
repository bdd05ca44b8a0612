"""What two or more tasks share; no task package imports another.

  features      [CLS] A [SEP] (B [SEP]) encoding (Python and in-graph), the feature-file cache, the input pipeline
  labels        a label set in a stable order
  layer_choice  the paper's feature choices (Table 7): which encoder layers a feature-based model reads
  folder        a fine-tuned model in float32, as its folder and export hold it
"""
