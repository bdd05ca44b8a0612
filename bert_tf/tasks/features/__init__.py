"""The paper's feature-based studies: contextual features from any layers (google-research's
extract_features.py, `extraction.py`). The six ways of combining layers of its Table 7, which NER's feature-based
tagger reads, are bert_tf.tasks.common.layer_choice."""
