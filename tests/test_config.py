"""BertConfig: google-research's bert_config.json read and written, presets, validation."""

import json

import pytest

from bert_tf.config import PRESETS, BertConfig

GOOGLE_KEYS = {"attention_probs_dropout_prob", "hidden_act", "hidden_dropout_prob", "hidden_size",
               "initializer_range", "intermediate_size", "max_position_embeddings", "num_attention_heads",
               "num_hidden_layers", "type_vocab_size", "vocab_size"}


@pytest.mark.parametrize("name,layers,hidden,heads", [
    ("tiny", 2, 128, 2), ("mini", 4, 256, 4), ("small", 4, 512, 8), ("medium", 8, 512, 8),
    ("base", 12, 768, 12), ("large", 24, 1024, 16)])
def test_presets_and_committed_configs_agree(name, layers, hidden, heads):
  config = BertConfig.from_preset(name)
  assert (config.num_hidden_layers, config.hidden_size, config.num_attention_heads) == (layers, hidden, heads)
  assert config.intermediate_size == 4 * hidden and config.type_vocab_size == 2
  committed = json.load(open(f"configs/bert_{name}.json"))
  assert set(committed) == GOOGLE_KEYS
  assert BertConfig.from_json_file(f"configs/bert_{name}.json") == config
  assert set(PRESETS) == {"tiny", "mini", "small", "medium", "base", "large"}


def test_round_trip_keeps_unknown_keys(tmp_path):
  values = dict(json.load(open("configs/bert_base.json")), directionality="bidi", pooler_fc_size=768,
                pooler_type="first_token_transform", vocab_size=119547)
  path = tmp_path / "bert_config.json"
  path.write_text(json.dumps(values))
  config = BertConfig.from_json_file(str(path))
  assert config.vocab_size == 119547 and config.extras == {
      "directionality": "bidi", "pooler_fc_size": 768, "pooler_type": "first_token_transform"}
  out = tmp_path / "out.json"
  config.to_json_file(str(out))
  assert json.load(open(out)) == values


@pytest.mark.parametrize("change,message", [
    (dict(hidden_size=129), "multiple of num_attention_heads"),
    (dict(hidden_act="swish"), "hidden_act"),
    (dict(vocab_size=0), "vocab_size"),
    (dict(hidden_dropout_prob=1.0), "hidden_dropout_prob"),
])
def test_validation_names_the_field(change, message):
  with pytest.raises(ValueError, match=message):
    BertConfig.from_preset("tiny", **change)


def test_file_errors(tmp_path):
  with pytest.raises(FileNotFoundError, match="nope.json"):
    BertConfig.from_json_file(str(tmp_path / "nope.json"))
  bad = tmp_path / "bad.json"
  bad.write_text("{not json")
  with pytest.raises(ValueError, match="bad.json: not valid JSON"):
    BertConfig.from_json_file(str(bad))
  partial = tmp_path / "partial.json"
  partial.write_text(json.dumps({"vocab_size": 5}))
  with pytest.raises(ValueError, match="partial.json: missing keys"):
    BertConfig.from_json_file(str(partial))
