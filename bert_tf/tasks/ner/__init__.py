"""Named entities (CoNLL-2003, any entity types) and any per-word tag set, fine-tuned or feature-based.

  data.py           CoNLL column files and JSON lines -> sentences, tag schemes, windows
  model.py          `BertTokenClassifier` (first piece of each word) and the trainer's task
  feature_based.py  the paper's frozen-BERT BiLSTM tagger (Table 7)
  metrics.py        conlleval's entity scores; word-level scores of a plain tag set
  folder.py         the fine-tuned model's folder (ner_model/): save, settings, load
  serving.py        the raw-text SavedModel: text in, words with tags and entities out
  run.py            what scripts/run_ner.py runs
"""

from __future__ import annotations

from bert_tf import registry


@registry.register_task
class Ner(registry.Task, name="ner", model_dir="ner_model", settings_name="ner.json", description="NER model",
          hf_class="BertForTokenClassification", served_name="ner", exporter="export_ner"):
  """scripts/run_ner.py and export_ner.py."""
