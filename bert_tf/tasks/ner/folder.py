"""NER: a fine-tuned model's folder (`<output_dir>/ner_model/`): writing it, reading its settings and loading
the model, for the run (`run.py`), export (`serving.py`) and `--init_checkpoint` alike."""

from __future__ import annotations

from bert_tf.tasks.common.folder import ModelFolder
from bert_tf.tasks.ner import feature_based as nfb
from bert_tf.tasks.ner import model as nf

MODEL_DIR = "ner_model"  # under --output_dir
SETTINGS_NAME = "ner.json"
FOLDER = ModelFolder(MODEL_DIR, SETTINGS_NAME, "run_ner.py")
is_model_dir, save_model, read_settings = FOLDER.is_model_dir, FOLDER.save_model, FOLDER.read_settings


def load_model(directory: str) -> tuple[nf.BertTokenClassifier | nfb.BertFeatureTagger, dict]:
  """(the float32 tagger saved by `save_model` in `directory`, its settings); call under the strategy's scope."""
  settings = read_settings(directory)
  bert_config = FOLDER.bert_config(directory)
  if settings.get("feature_based"):
    model = nfb.BertFeatureTagger(bert_config, len(settings["labels"]), settings["feature_based"],
                                  lstm_units=settings["lstm_units"], dtype="float32")
  else:
    model = nf.BertTokenClassifier(bert_config, len(settings["labels"]), dtype="float32")
  return FOLDER.restore(model, directory), settings
