"""Weight conversion: real all-MiniLM-L6-v2 weights against goldens from Hugging Face transformers
(tests/golden/make_minilm_golden.py), TF1 checkpoints written as google-research writes and reads them,
exact round trips, and the converter script."""

import dataclasses
import importlib.util
import json
import os
import struct
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf

import assets
from bert_tf.config import BertConfig
from bert_tf.model import convert
from bert_tf.model.encoder import BertEncoder
from bert_tf.model.pretraining import BertPretrainer
from test_encoder import randomize, tiny_config

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
GOLDEN = os.path.join(REPO, "tests", "golden", "minilm_golden.npz")
INPUTS = ("input_ids", "input_mask", "segment_ids")


def google_research_names(num_layers: int, heads: bool) -> list[tuple[str, str, bool]]:
  """(google-research TF1 name, Hugging Face name, torch weight is the transpose), written out by hand from
  google-research's modeling.py / run_pretraining.py and transformers' BertForPreTraining; independent of
  the converter's own renaming."""
  rows = [("bert/embeddings/word_embeddings", "embeddings.word_embeddings.weight", False),
          ("bert/embeddings/token_type_embeddings", "embeddings.token_type_embeddings.weight", False),
          ("bert/embeddings/position_embeddings", "embeddings.position_embeddings.weight", False),
          ("bert/embeddings/LayerNorm/gamma", "embeddings.LayerNorm.weight", False),
          ("bert/embeddings/LayerNorm/beta", "embeddings.LayerNorm.bias", False)]
  for k in range(num_layers):
    gr, hf = f"bert/encoder/layer_{k}", f"encoder.layer.{k}"
    for part in ("attention/self/query", "attention/self/key", "attention/self/value",
                 "attention/output/dense", "intermediate/dense", "output/dense"):
      rows += [(f"{gr}/{part}/kernel", f"{hf}.{part.replace('/', '.')}.weight", True),
               (f"{gr}/{part}/bias", f"{hf}.{part.replace('/', '.')}.bias", False)]
    for part in ("attention/output/LayerNorm", "output/LayerNorm"):
      rows += [(f"{gr}/{part}/gamma", f"{hf}.{part.replace('/', '.')}.weight", False),
               (f"{gr}/{part}/beta", f"{hf}.{part.replace('/', '.')}.bias", False)]
  rows += [("bert/pooler/dense/kernel", "pooler.dense.weight", True),
           ("bert/pooler/dense/bias", "pooler.dense.bias", False)]
  if heads:
    rows += [("cls/predictions/transform/dense/kernel", "cls.predictions.transform.dense.weight", True),
             ("cls/predictions/transform/dense/bias", "cls.predictions.transform.dense.bias", False),
             ("cls/predictions/transform/LayerNorm/gamma", "cls.predictions.transform.LayerNorm.weight",
              False),
             ("cls/predictions/transform/LayerNorm/beta", "cls.predictions.transform.LayerNorm.bias",
              False),
             ("cls/predictions/output_bias", "cls.predictions.bias", False),
             ("cls/seq_relationship/output_weights", "cls.seq_relationship.weight", False),
             ("cls/seq_relationship/output_bias", "cls.seq_relationship.bias", False)]
  return rows


def write_like_google_research(weights: dict[str, np.ndarray], prefix: str) -> None:
  """A checkpoint as google-research's TF1 code writes it: graph variables and a tf.compat.v1 Saver."""
  with tf.Graph().as_default():
    variables = [tf.compat.v1.get_variable(name, initializer=tf.constant(value))
                 for name, value in weights.items()]
    with tf.compat.v1.Session() as session:
      session.run(tf.compat.v1.global_variables_initializer())
      tf.compat.v1.train.Saver(variables).save(session, prefix, write_meta_graph=False)


def read_like_google_research(prefix: str, shapes: dict[str, tuple]) -> dict[str, np.ndarray]:
  """google-research's init path: graph variables initialised by tf.train.init_from_checkpoint."""
  with tf.Graph().as_default():
    variables = {name: tf.compat.v1.get_variable(name, shape=shape, initializer=tf.zeros_initializer())
                 for name, shape in shapes.items()}
    tf.compat.v1.train.init_from_checkpoint(prefix, {"bert/": "bert/", "cls/": "cls/"})
    with tf.compat.v1.Session() as session:
      session.run(tf.compat.v1.global_variables_initializer())
      return session.run(variables)


def write_safetensors(tensors: dict[str, np.ndarray], path: str) -> None:
  """The safetensors layout written by hand: 8-byte header size, JSON header, raw little-endian data."""
  codes = {np.dtype(np.float32): "F32", np.dtype(np.int64): "I64"}
  header, blobs, offset = {}, [], 0
  for name, value in tensors.items():
    data = np.ascontiguousarray(value).tobytes()
    header[name] = {"dtype": codes[value.dtype], "shape": list(value.shape),
                    "data_offsets": [offset, offset + len(data)]}
    blobs.append(data)
    offset += len(data)
  encoded = json.dumps(header).encode()
  with open(path, "wb") as f:
    f.write(struct.pack("<Q", len(encoded)) + encoded + b"".join(blobs))


def assert_same_weights(a, b):
  assert [v.path for v in a.weights] == [v.path for v in b.weights]
  for x, y in zip(a.weights, b.weights):
    np.testing.assert_array_equal(x.numpy(), y.numpy(), err_msg=x.path)


# --- Real weights -------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def minilm_dir():
  return assets.minilm_dir()


@pytest.fixture(scope="module")
def minilm(minilm_dir):
  return convert.load_hf(minilm_dir)


@pytest.fixture(scope="module")
def golden():
  return dict(np.load(GOLDEN))


def check_against_golden(encoder, golden):
  """Max abs errors (real positions, padded positions, pooled, layer 2) of `encoder` vs the goldens."""
  out = encoder({k: golden[k] for k in INPUTS})
  real = golden["input_mask"].astype(bool)
  diff = np.abs(out["sequence_output"].numpy() - golden["sequence_output"])
  errors = (diff[real].max(), diff[~real].max(),
            np.abs(out["pooled_output"].numpy() - golden["pooled_output"]).max(),
            np.abs(out["encoder_outputs"][2].numpy() - golden["layer_2_output"]).max())
  assert errors[0] < 1e-4, errors  # The acceptance bound, at every real token.
  assert errors[1] < 1e-3, errors  # Padded positions carry no meaning; they only must not blow up.
  assert errors[2] < 1e-4 and errors[3] < 1e-4, errors
  return out


def test_golden_file_is_small_and_padded(golden):
  assert os.path.getsize(GOLDEN) < 1 << 20
  lengths = golden["input_mask"].sum(1)
  assert len(set(lengths.tolist())) == len(lengths) and lengths.max() < golden["input_mask"].shape[1]
  assert golden["segment_ids"].max() == 1


def test_hf_directory_matches_transformers_goldens(minilm, golden):
  assert minilm.config.num_hidden_layers == 6 and minilm.config.hidden_size == 384
  assert minilm.config.extras["layer_norm_eps"] == 1e-12
  assert minilm.heads == () and minilm.pretrainer is None and minilm.unused == []
  check_against_golden(minilm.encoder, golden)


def test_google_research_checkpoint_of_the_same_weights(minilm_dir, minilm, golden, tmp_path):
  state = convert.read_safetensors(os.path.join(minilm_dir, "model.safetensors"))
  weights = {gr: (state[hf].T if transpose else state[hf])
             for gr, hf, transpose in google_research_names(6, heads=False)}
  write_like_google_research(weights, str(tmp_path / "bert_model.ckpt"))
  minilm.config.to_json_file(str(tmp_path / "bert_config.json"))
  converted = convert.load_tf1(str(tmp_path))
  assert converted.unused == [] and converted.heads == ()
  out = check_against_golden(converted.encoder, golden)
  reference = minilm.encoder({k: golden[k] for k in INPUTS})
  np.testing.assert_array_equal(out["sequence_output"], reference["sequence_output"])


def test_converter_script_round_trips_exactly(minilm_dir, minilm, tmp_path):
  spec = importlib.util.spec_from_file_location("convert_checkpoint",
                                                os.path.join(REPO, "scripts", "convert_checkpoint.py"))
  script = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(script)

  def run(*argv):
    script.FLAGS.unparse_flags()
    script.FLAGS(["convert_checkpoint.py", *argv])
    script.main([])

  ours, tf1, again, hf_dir = (str(tmp_path / name) for name in ("ours", "tf1", "ours_again", "hf"))
  run("--input_format=hf", f"--input={minilm_dir}", "--output_format=ours", f"--output_dir={ours}")
  run("--input_format=ours", f"--input={ours}", "--output_format=tf1", f"--output_dir={tf1}")
  run("--input_format=tf1", f"--input={tf1}/bert_model.ckpt", "--output_format=ours",
      f"--output_dir={again}")
  run("--input_format=ours", f"--input={again}", "--output_format=hf", f"--output_dir={hf_dir}")
  assert sorted(os.listdir(ours)) == ["bert_config.json", "encoder", "vocab.txt"]
  assert sorted(os.listdir(tf1)) == ["bert_config.json", "bert_model.ckpt.data-00000-of-00001",
                                     "bert_model.ckpt.index", "vocab.txt"]
  assert BertConfig.from_json_file(f"{again}/bert_config.json") == minilm.config
  # The TF1 checkpoint holds exactly google-research's names, with the HF tensors in TF1 layout.
  state = convert.read_safetensors(os.path.join(minilm_dir, "model.safetensors"))
  tf1_weights = convert.read_tf1_checkpoint(f"{tf1}/bert_model.ckpt")
  expected = google_research_names(6, heads=False)
  assert sorted(tf1_weights) == sorted(gr for gr, _, _ in expected)
  for gr, hf, transpose in expected:
    np.testing.assert_array_equal(tf1_weights[gr], state[hf].T if transpose else state[hf], err_msg=gr)
  # ours -> tf1 -> ours is bitwise exact, and the encoder alone reads from an `ours` checkpoint.
  assert_same_weights(convert.load_ours(again).encoder, minilm.encoder)
  encoder = BertEncoder(minilm.config)
  status = tf.train.Checkpoint(encoder=encoder).read(tf.train.latest_checkpoint(f"{ours}/encoder"))
  status.assert_existing_objects_matched()
  assert_same_weights(encoder, minilm.encoder)
  # hf -> ours -> tf1 -> ours -> hf gives back every tensor of the real folder exactly, and its config.
  assert sorted(os.listdir(hf_dir)) == ["config.json", "model.safetensors", "special_tokens_map.json",
                                    "tokenizer_config.json", "vocab.txt"]
  back = convert.read_safetensors(f"{hf_dir}/model.safetensors")
  assert sorted(back) == sorted(state)
  for name, value in state.items():
    assert back[name].dtype == value.dtype, name
    np.testing.assert_array_equal(back[name], value, err_msg=name)
  # Its config too, but for the keys that describe the source file (written fresh: transformers writes its own).
  with open(f"{hf_dir}/config.json") as f, open(os.path.join(minilm_dir, "config.json")) as g:
    source = json.load(g)
    assert {"_name_or_path", "transformers_version"} <= set(source)
    assert json.load(f) == {k: v for k, v in source.items() if k not in ("_name_or_path", "transformers_version")}
  with open(f"{hf_dir}/vocab.txt", "rb") as f, open(os.path.join(minilm_dir, "vocab.txt"), "rb") as g:
    assert f.read() == g.read()
  with open(f"{hf_dir}/tokenizer_config.json") as f:
    assert json.load(f)["do_lower_case"] is True  # bert-base-uncased's vocabulary has no upper-case token.


# --- Tiny models, with the pretraining heads ----------------------------------------------------------


@pytest.fixture
def tiny_pretrainer():
  model = BertPretrainer(tiny_config())
  randomize(model)
  return model


def tiny_converted(model):
  return convert.Converted(model.config, model.encoder, model, convert.HEADS)


def test_tf1_round_trip_with_heads_is_exact_and_google_research_reads_it(tiny_pretrainer, tmp_path):
  prefix = convert.save_tf1(tiny_converted(tiny_pretrainer), str(tmp_path / "tf1"))
  written = convert.read_tf1_checkpoint(prefix)
  rows = google_research_names(2, heads=True)
  assert sorted(written) == sorted(gr for gr, _, _ in rows)
  assert written["cls/seq_relationship/output_weights"].shape == (2, 12)
  assert written["bert/encoder/layer_1/attention/self/key/kernel"].shape == (12, 12)
  read = read_like_google_research(prefix, {name: value.shape for name, value in written.items()})
  for name, value in written.items():
    np.testing.assert_array_equal(read[name], value, err_msg=name)
  np.testing.assert_array_equal(
      np.concatenate([written[f"bert/encoder/layer_0/attention/self/{p}/kernel"]
                      for p in ("query", "key", "value")], axis=1),
      tiny_pretrainer.encoder.layer_0.attention_qkv.kernel.numpy())

  back = convert.load_tf1(str(tmp_path / "tf1"))
  assert back.heads == convert.HEADS and back.vocab_file is None
  assert_same_weights(back.pretrainer, tiny_pretrainer)
  ours = str(tmp_path / "ours")
  convert.save_ours(back, ours)
  again = convert.load_ours(ours)
  assert again.heads == convert.HEADS
  assert_same_weights(again.pretrainer, tiny_pretrainer)


def test_hf_directory_with_heads_and_legacy_names(tiny_pretrainer, tmp_path):
  tf1 = convert.get_tf1_weights(convert.tf1_links(tiny_pretrainer.encoder, tiny_pretrainer))
  state = {}
  for gr, hf, transpose in google_research_names(2, heads=True):
    hf = "bert." + hf if hf.startswith(("embeddings", "encoder", "pooler")) else hf
    hf = hf.replace("LayerNorm.weight", "LayerNorm.gamma").replace("LayerNorm.bias", "LayerNorm.beta")
    state[hf] = np.ascontiguousarray(tf1[gr].T if transpose else tf1[gr])
  state["bert.embeddings.position_ids"] = np.arange(16, dtype=np.int64)[None]
  state["cls.predictions.decoder.weight"] = tf1["bert/embeddings/word_embeddings"]
  state["classifier.weight"] = np.zeros((3, 12), np.float32)
  write_safetensors(state, str(tmp_path / "model.safetensors"))
  config = dict(tiny_pretrainer.config.to_dict(), model_type="bert", architectures=["BertForPreTraining"])
  (tmp_path / "config.json").write_text(json.dumps(config))
  (tmp_path / "vocab.txt").write_text("".join(f"tok{i}\n" for i in range(99)))

  converted = convert.load_hf(str(tmp_path))
  assert converted.heads == convert.HEADS
  assert converted.unused == ["classifier.weight"]
  assert converted.vocab_file == str(tmp_path / "vocab.txt")
  assert converted.config.extras == {"model_type": "bert", "architectures": ["BertForPreTraining"]}
  assert_same_weights(converted.pretrainer, tiny_pretrainer)


def test_missing_tensors_are_listed(tiny_pretrainer):
  weights = convert.get_tf1_weights(convert.tf1_links(tiny_pretrainer.encoder))
  del weights["bert/pooler/dense/bias"]
  del weights["bert/encoder/layer_1/attention/self/value/kernel"]
  with pytest.raises(KeyError, match=r"missing 2 tensor\(s\).*bert/encoder/layer_1/attention/self/value/"
                     r"kernel, bert/pooler/dense/bias"):
    convert.from_tf1_weights(weights, tiny_pretrainer.config, source="my.ckpt")


def test_shape_mismatch_names_the_variable_and_both_shapes(tiny_pretrainer):
  weights = convert.get_tf1_weights(convert.tf1_links(tiny_pretrainer.encoder))
  weights["bert/encoder/layer_0/intermediate/dense/kernel"] = np.zeros((12, 40), np.float32)
  with pytest.raises(ValueError, match=r"bert/encoder/layer_0/intermediate/dense/kernel: the checkpoint has "
                     r"\[12, 40\], the model \(layer_0/intermediate/kernel\) needs \[12, 37\]"):
    convert.from_tf1_weights(weights, tiny_pretrainer.config)


def test_hf_config_mapping():
  values = {"model_type": "bert", "vocab_size": 99, "hidden_size": 12, "num_hidden_layers": 2,
            "num_attention_heads": 3, "intermediate_size": 37, "hidden_act": "gelu_pytorch_tanh",
            "layer_norm_eps": 1e-12, "pad_token_id": 0}
  config = convert.hf_config_to_bert_config(values)
  assert (config.vocab_size, config.hidden_act, config.max_position_embeddings) == (99, "gelu_new", 512)
  assert config.extras == {"model_type": "bert", "layer_norm_eps": 1e-12, "pad_token_id": 0}
  with pytest.raises(ValueError, match="model_type is 'roberta'"):
    convert.hf_config_to_bert_config(dict(values, model_type="roberta"))
  with pytest.raises(ValueError, match="position_embedding_type 'relative_key'"):
    convert.hf_config_to_bert_config(dict(values, position_embedding_type="relative_key"))


@pytest.fixture(scope="module")
def pretrained(tmp_path_factory):
  """A tiny model pretrained here: 4 steps of run_pretraining, training checkpoints at steps 2 and 4."""
  import training_helpers as th
  from bert_tf.tasks.pretraining import run as pretraining
  from bert_tf.tasks.pretraining.config import PretrainingConfig

  directory = tmp_path_factory.mktemp("pretrained")
  data = th.write_records(directory / "data", num_files=1, per_file=9)
  config = PretrainingConfig(
      input_file=data, output_dir=str(directory / "out"), bert_config=th.tiny_bert_config(), max_seq_length=th.T,
      max_predictions_per_seq=th.P, train_batch_size=2, num_train_steps=4, num_warmup_steps=0, learning_rate=1e-2,
      save_checkpoints_steps=2, distribution_strategy="one_device")
  pretraining.run_pretraining(config)
  return str(directory / "out"), th.write_vocab(directory)


def test_pretraining_output_directory_converts_with_its_heads(pretrained):
  """A pretraining --output_dir: its newest training checkpoint, or --step's, with the MLM and NSP heads."""
  out, _ = pretrained
  newest = convert.load_ours(out)
  assert newest.heads == convert.HEADS and newest.vocab_file is None
  step_2 = convert.load_ours(out, step=2)
  assert step_2.heads == convert.HEADS
  assert_same_weights(convert.load_ours(f"{out}/checkpoints/ckpt-2").pretrainer, step_2.pretrainer)
  assert_same_weights(convert.load_ours(f"{out}/checkpoints").pretrainer, newest.pretrainer)
  assert not np.array_equal(step_2.pretrainer.mlm_head.output_bias.numpy(),
                            newest.pretrainer.mlm_head.output_bias.numpy())
  # The encoder hand-off written at the end is the last step's encoder, without heads.
  handoff = convert.load_ours(f"{out}/encoder_checkpoint")
  assert handoff.heads == ()
  assert_same_weights(handoff.encoder, newest.encoder)
  with pytest.raises(FileNotFoundError, match=f"--step=3: {out}/checkpoints has no ckpt-3; its checkpoints are "
                     "at steps 2, 4$"):
    convert.load_ours(out, step=3)
  with pytest.raises(FileNotFoundError, match=f"{out}/train: no checkpoint of bert_tf's here"):
    convert.load_ours(f"{out}/train")


def test_a_model_pretrained_here_gives_the_same_outputs_in_transformers(pretrained, tmp_path):
  """Written as hf, transformers' BertForPreTraining and BertModel load it with no key missing or left over, and
  compute our outputs (sequence, pooled, masked-LM and NSP logits) within 1e-5; its tokenizer gives our ids."""
  import torch  # Development requirements (CPU torch); imported here to keep it out of collection.
  import transformers

  from bert_tf.data import tokenization

  out, vocab = pretrained
  converted = convert.load_ours(out)
  converted.vocab_file = vocab
  convert.save_hf(converted, str(tmp_path))
  with open(tmp_path / "config.json") as f:
    assert json.load(f)["architectures"] == ["BertForPreTraining"]
  theirs, info = transformers.BertForPreTraining.from_pretrained(str(tmp_path), output_loading_info=True,
                                                                attn_implementation="eager")
  assert (info["missing_keys"], info["unexpected_keys"], info["mismatched_keys"]) == (set(), set(), set())
  encoder_only = transformers.BertModel.from_pretrained(str(tmp_path), attn_implementation="eager")

  rng = np.random.default_rng(5)
  lengths = [13, 9, 4]
  ids = rng.integers(5, 99, (3, 13)).astype(np.int32)
  mask = (np.arange(13)[None] < np.array(lengths)[:, None]).astype(np.int32)
  segments = (np.arange(13)[None] >= 3).astype(np.int32) * mask
  positions = np.array([[1, 5, 12], [0, 2, 8], [1, 2, 3]], np.int32)
  ours = converted.encoder({"input_ids": ids, "input_mask": mask, "segment_ids": segments})
  mlm = converted.pretrainer.mlm_head(ours["sequence_output"], positions).numpy()
  nsp = converted.pretrainer.nsp_head(ours["pooled_output"]).numpy()
  with torch.no_grad():
    args = dict(input_ids=torch.tensor(ids, dtype=torch.long), attention_mask=torch.tensor(mask, dtype=torch.long),
                token_type_ids=torch.tensor(segments, dtype=torch.long))
    heads = theirs.eval()(**args)
    encoded = encoder_only.eval()(**args)
  real = mask.astype(bool)
  np.testing.assert_allclose(encoded.last_hidden_state.numpy()[real], ours["sequence_output"].numpy()[real],
                             atol=1e-5)
  np.testing.assert_allclose(encoded.pooler_output.numpy(), ours["pooled_output"].numpy(), atol=1e-5)
  np.testing.assert_allclose(np.take_along_axis(heads.prediction_logits.numpy(), positions[..., None], axis=1),
                             mlm.reshape(3, 3, -1), atol=1e-5)
  np.testing.assert_allclose(heads.seq_relationship_logits.numpy(), nsp, atol=1e-5)

  tokenizer = transformers.AutoTokenizer.from_pretrained(str(tmp_path))
  text = "W7 w12 w93 unknown"
  ours_tokenizer = tokenization.FullTokenizer(vocab, do_lower_case=True)
  ours_ids = ours_tokenizer.convert_tokens_to_ids(["[CLS]", *ours_tokenizer.tokenize(text), "[SEP]"])
  assert tokenizer(text)["input_ids"] == ours_ids


def test_a_checkpoint_of_another_size_is_one_line_naming_both_files(tiny_pretrainer, tmp_path):
  """A google-research checkpoint with a config of another size: one line (a ValueError, which the scripts print
  as `error: ...`) naming the checkpoint, the config, the tensor and both shapes, or the two layer counts."""
  weights = convert.get_tf1_weights(convert.tf1_links(tiny_pretrainer.encoder))
  convert.write_tf1_checkpoint(weights, str(tmp_path / "bert_model.ckpt"))
  config = tiny_pretrainer.config
  wider = tmp_path / "wider.json"
  BertConfig.from_dict({**config.to_dict(), "vocab_size": config.vocab_size + 7}).to_json_file(str(wider))
  with pytest.raises(ValueError) as caught:
    convert.load_tf1(str(tmp_path), bert_config_file=str(wider))
  message = str(caught.value)
  assert message == (
      f"{tmp_path}/bert_model.ckpt: does not match this encoder's bert_config.json ({wider}): "
      f"bert/embeddings/word_embeddings: the checkpoint has [{config.vocab_size}, {config.hidden_size}], the model "
      f"(word_embeddings/embeddings) needs [{config.vocab_size + 7}, {config.hidden_size}]; pass the "
      "bert_config.json the checkpoint was trained with")

  # A model with fewer layers than the checkpoint (whose extra layers were silently dropped before), or more.
  for layers in (config.num_hidden_layers - 1, config.num_hidden_layers + 1):
    with pytest.raises(ValueError, match=f"the checkpoint has {config.num_hidden_layers} layers, the model "
                       f"{layers} \\(num_hidden_layers\\)"):
      convert.from_tf1_weights(weights, BertConfig.from_dict({**config.to_dict(), "num_hidden_layers": layers}),
                               source="my.ckpt")
  del weights["bert/pooler/dense/bias"]
  with pytest.raises(ValueError, match=r"my.ckpt: missing 1 tensor\(s\) the model needs: bert/pooler/dense/bias$"):
    convert.from_tf1_weights(weights, config, source="my.ckpt")


def test_script_format_choices_are_the_library_ones():
  """The script spells them out so as not to load TensorFlow before its flags are parsed."""
  import ast

  tree = ast.parse(open(os.path.join(REPO, "scripts", "convert_checkpoint.py"), encoding="utf-8").read())
  constants = {node.targets[0].id: ast.literal_eval(node.value) for node in tree.body
               if isinstance(node, ast.Assign) and node.targets[0].id.endswith("_FORMATS")}
  assert sorted(constants["INPUT_FORMATS"]) == sorted(convert.LOADERS)
  assert sorted(constants["OUTPUT_FORMATS"]) == sorted(convert.SAVERS)


def test_script_run_shows_no_tensorflow_start_up_noise(tiny_pretrainer, tmp_path):
  """Run as a user runs it (fresh process, relative paths, no TF_CPP_MIN_LOG_LEVEL): stderr says what was
  written, nothing of TensorFlow's start-up."""
  convert.save_tf1(tiny_converted(tiny_pretrainer), str(tmp_path / "tf1"))
  env = {k: v for k, v in os.environ.items() if k != "TF_CPP_MIN_LOG_LEVEL"}
  result = subprocess.run([sys.executable, os.path.join(REPO, "scripts", "convert_checkpoint.py"),
                           "--input_format=tf1", "--input=tf1", "--output_dir=ours"], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=300)
  assert result.returncode == 0, result.stderr[-3000:]
  assert "wrote ours/encoder/ckpt-1" in result.stderr
  noise = ("cuInit", "oneDNN", "AVX", "cpu_feature_guard", "cuda", "absl::InitializeLog", "Sharding callback")
  assert not [word for word in noise if word in result.stderr], result.stderr


def test_script_refuses_a_file_or_a_non_empty_output_dir_unless_overwriting_it_whole(tiny_pretrainer, tmp_path):
  """Issue 30 (4): --output_dir naming a file was a traceback; (10): a non-empty folder was written over, the
  files already there left beside the new ones."""
  import concurrent.futures

  import training_helpers as th

  convert.save_tf1(tiny_converted(tiny_pretrainer), str(tmp_path / "tf1"))
  (tmp_path / "notes.txt").write_text("mine\n")
  (tmp_path / "used").mkdir()
  (tmp_path / "used" / "notes.txt").write_text("mine\n")
  (tmp_path / "old").mkdir()
  for name in ("config.json", "model.safetensors", "stale.bin"):
    (tmp_path / "old" / name).write_text("an earlier conversion\n")
  script = os.path.join(REPO, "scripts", "convert_checkpoint.py")

  def run(*flags):
    return th.run_python([script, "--input_format=tf1", *flags])

  refused = {
      (f"--input={tmp_path}/tf1", f"--output_dir={tmp_path}/notes.txt"):
          f"--output_dir={tmp_path}/notes.txt is a file; give a folder (created if missing)",
      (f"--input={tmp_path}/tf1", f"--output_dir={tmp_path}/used"):
          f"--output_dir={tmp_path}/used is not empty (it holds notes.txt); give a new or empty folder, or pass "
          "--overwrite_output_dir to replace it and all it holds",
  }
  with concurrent.futures.ThreadPoolExecutor(2) as pool:
    runs = {flags: pool.submit(run, *flags) for flags in refused}
    done = run(f"--input={tmp_path}/tf1", f"--output_dir={tmp_path}/old", "--output_format=hf",
               "--overwrite_output_dir")
    for flags, message in refused.items():
      result = runs[flags].result()
      assert (result.returncode, result.stderr.strip().splitlines()[-1]) == (1, f"error: {message}"), flags
  assert done.returncode == 0, done.stderr[-3000:]
  # Replaced whole: the earlier files are gone, nothing but the conversion is there.
  assert sorted(os.listdir(tmp_path / "old")) == ["config.json", "model.safetensors"]
  assert json.loads((tmp_path / "old" / "config.json").read_text())["hidden_size"] == tiny_pretrainer.config.hidden_size
  assert (tmp_path / "used" / "notes.txt").read_text() == "mine\n"


def test_output_dir_is_checked_before_anything_is_read(tmp_path):
  out = tmp_path / "out"
  for fine in (out, tmp_path / "new" / "deeper"):  # missing, or empty
    convert.check_output_dir(str(fine))
  out.mkdir()
  convert.check_output_dir(str(out))
  for name in ("a", "b", "c", "d", "e"):
    (out / name).write_text("")
  with pytest.raises(ValueError) as caught:
    convert.check_output_dir(str(out))
  assert str(caught.value) == (f"--output_dir={out} is not empty (it holds a, b, c and 2 more); give a new or empty "
                               "folder, or pass --overwrite_output_dir to replace it and all it holds")
  convert.check_output_dir(str(out), overwrite=True, source=str(tmp_path / "elsewhere"))
  for inside in (out, out / "a", out / "ours" / "encoder"):  # replacing the folder would remove the input
    with pytest.raises(ValueError) as caught:
      convert.check_output_dir(str(out), overwrite=True, source=str(inside))
    assert str(caught.value) == (f"--output_dir={out} {'is' if inside == out else 'holds'} --input's {inside}, "
                                 "which --overwrite_output_dir would remove; give another --output_dir")
  with pytest.raises(NotADirectoryError, match=f"^--output_dir={out}/a is a file; give a folder"):
    convert.check_output_dir(str(out / "a"), overwrite=True)
  # A run folder's newest checkpoint is what --input reads: replacing the checkpoints/ folder would remove it,
  # however the folder is spelled; the other flags' files likewise.
  run = tmp_path / "run"
  (run / "checkpoints").mkdir(parents=True)
  for name in ("ckpt-3.index", "ckpt-3.data-00000-of-00001"):
    (run / "checkpoints" / name).write_text("")
  (run / "checkpoints" / "checkpoint").write_text('model_checkpoint_path: "ckpt-3"\n')
  os.symlink(run, tmp_path / "link")
  with pytest.raises(ValueError) as caught:
    convert.check_output_dir(str(tmp_path / "link" / "checkpoints"), overwrite=True, source=str(run))
  assert str(caught.value) == (f"--output_dir={tmp_path}/link/checkpoints holds --input's "
                               f"{run}/checkpoints/ckpt-3.data-00000-of-00001, which --overwrite_output_dir would "
                               "remove; give another --output_dir")
  with pytest.raises(ValueError, match=f"^--output_dir={out} holds --vocab_file's {out}/b, which"):
    convert.check_output_dir(str(out), overwrite=True, source=str(run), inputs={"vocab_file": [str(out / "b")]})


# --- Released weights by name ------------------------------------------------------------------------------


def hf_cache_with(model_dir, cache, model_id: str, revision: str = "0123456789abcdef0123456789abcdef01234567"):
  """A Hugging Face hub cache holding `model_dir`'s files as huggingface_hub lays it out:
  models--<org>--<name>/blobs/<hash> (the contents), snapshots/<revision>/<file> (links to them), refs/main."""
  import hashlib

  repo = cache / ("models--" + model_id.replace("/", "--"))
  (repo / "blobs").mkdir(parents=True)
  (repo / "snapshots" / revision).mkdir(parents=True)
  (repo / "refs").mkdir()
  (repo / "refs" / "main").write_text(revision)
  for name in sorted(os.listdir(model_dir)):
    data = open(os.path.join(model_dir, name), "rb").read()
    blob = repo / "blobs" / hashlib.sha256(data).hexdigest()
    blob.write_bytes(data)
    os.symlink(os.path.relpath(blob, repo / "snapshots" / revision), repo / "snapshots" / revision / name)
  return repo


def test_a_hugging_face_model_id_is_read_from_the_cache_offline_and_converted_once(tiny_pretrainer, tmp_path,
                                                                                  monkeypatch):
  from huggingface_hub import constants

  from bert_tf.model import released
  from bert_tf.training import finetuning

  converted = tiny_converted(tiny_pretrainer)
  converted.vocab_file = str(tmp_path / "vocab.txt")
  (tmp_path / "vocab.txt").write_text("".join(f"{t}\n" for t in ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] +
                                              [f"tok{i}" for i in range(94)]))
  convert.save_hf(converted, str(tmp_path / "made_here"))
  hf_cache_with(str(tmp_path / "made_here"), tmp_path / "hub", "bert-tf-tests/tiny-bert")
  monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path / "hub"))
  monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)  # No network: only the cache.
  monkeypatch.setenv("BERT_TF_CACHE", str(tmp_path / "bert_tf_cache"))

  folder = released.local_path("hf:bert-tf-tests/tiny-bert")
  assert folder == str(tmp_path / "bert_tf_cache" / "released" / "hf" / "bert-tf-tests--tiny-bert" /
                       "0123456789abcdef0123456789abcdef01234567")
  back = convert.load_ours(folder)
  assert back.heads == convert.HEADS
  hf_keys = {"model_type": "bert", "architectures": ["BertForPreTraining"], "layer_norm_eps": 1e-12}
  assert back.config == dataclasses.replace(tiny_pretrainer.config, extras=hf_keys)
  assert_same_weights(back.pretrainer, tiny_pretrainer)
  # Converted once: the next use reads our cache and converts nothing.
  monkeypatch.setattr(convert, "load_hf", lambda *a, **k: pytest.fail("converted a second time"))
  assert finetuning.bert_config_for(None, "hf:bert-tf-tests/tiny-bert") == back.config
  encoder = BertEncoder(tiny_pretrainer.config)
  assert finetuning.init_encoder(encoder, "hf:bert-tf-tests/tiny-bert").startswith(folder)
  assert_same_weights(encoder, tiny_pretrainer.encoder)

  with pytest.raises(FileNotFoundError) as caught:
    released.local_path("hf:google-bert/bert-base-uncased")
  message = str(caught.value)
  assert message.startswith(f"hf:google-bert/bert-base-uncased: not in the cache ({tmp_path}/hub/"
                            "models--google-bert--bert-base-uncased) and it could not be downloaded here (")
  assert "run `hf download google-bert/bert-base-uncased config.json model.safetensors vocab.txt " in message
  # Issue 30 (10): "copy that folder" said neither which folder nor where to.
  assert message.endswith(
      "`, then copy the folder it fills there, models--google-bert--bert-base-uncased under that machine's "
      f"HF_HUB_CACHE cache, to {tmp_path}/hub/models--google-bert--bert-base-uncased here (or set HF_HUB_CACHE to a "
      "cache that holds it)")
  assert "\n" not in message


def test_a_keras_hub_preset_is_read_from_kagglehubs_cache_offline_and_computes_what_keras_hub_does(tmp_path,
                                                                                                   monkeypatch):
  """A tiny preset written by keras-hub itself (save_to_preset), placed where kagglehub keeps
  `keras_hub:bert_tiny_en_uncased` (models/keras/bert/keras/<preset>/<version>/ and its .complete markers)."""
  import keras_hub

  from bert_tf.model import released

  backbone = keras_hub.models.BertBackbone(vocabulary_size=99, num_layers=2, num_heads=3, hidden_dim=18,
                                           intermediate_dim=37, max_sequence_length=16, num_segments=2)
  rng = np.random.default_rng(3)
  for variable in backbone.weights:
    variable.assign(rng.normal(scale=0.5, size=variable.shape).astype("float32"))
  vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + [f"w{i}" for i in range(94)]
  handle = keras_hub.models.BertBackbone.presets["bert_tiny_en_uncased"]["kaggle_handle"]
  version = handle.rsplit("/", 1)[-1]
  model = tmp_path / "kagglehub" / "models" / "keras" / "bert" / "keras" / "bert_tiny_en_uncased"
  backbone.save_to_preset(str(model / version))
  keras_hub.models.BertTokenizer(vocabulary=vocab, lowercase=True).save_to_preset(str(model / version))
  for root, _, files in os.walk(model / version):
    for name in files:
      relative = os.path.relpath(os.path.join(root, name), model / version)
      marker = model / ".complete" / version / (relative + ".complete")
      marker.parent.mkdir(parents=True, exist_ok=True)
      marker.write_text("")
  monkeypatch.setenv("KAGGLEHUB_CACHE", str(tmp_path / "kagglehub"))
  monkeypatch.setenv("BERT_TF_CACHE", str(tmp_path / "bert_tf_cache"))

  folder = released.local_path("keras_hub:bert_tiny_en_uncased")
  assert folder == str(tmp_path / "bert_tf_cache" / "released" / "keras_hub" / "bert_tiny_en_uncased" / version)
  converted = convert.load_ours(folder)
  assert converted.config.hidden_act == "gelu_new" and converted.config.num_hidden_layers == 2
  with open(converted.vocab_file) as f:
    assert f.read().splitlines() == vocab
  ids = rng.integers(5, 99, (3, 11)).astype(np.int32)
  mask = (np.arange(11)[None] < np.array([[11], [6], [2]])).astype(np.int32)
  segments = (np.arange(11)[None] >= 4).astype(np.int32) * mask
  ours = converted.encoder({"input_ids": ids, "input_mask": mask, "segment_ids": segments})
  theirs = backbone({"token_ids": ids, "padding_mask": mask, "segment_ids": segments})
  real = mask.astype(bool)
  np.testing.assert_allclose(ours["sequence_output"].numpy()[real], np.asarray(theirs["sequence_output"])[real],
                             atol=1e-5)
  np.testing.assert_allclose(ours["pooled_output"].numpy(), np.asarray(theirs["pooled_output"]), atol=1e-5)

  # An empty cache and no network (kagglehub has no offline switch; on this machine it fails on api.kaggle.com's
  # name, as this stand-in does, without asking the network in a test).
  import kagglehub

  def no_network(handle, path=None, **kwargs):
    raise ConnectionError(f"Failed to resolve 'api.kaggle.com' for {handle}")

  monkeypatch.setattr(kagglehub, "model_download", no_network)
  monkeypatch.setenv("KAGGLEHUB_CACHE", str(tmp_path / "empty"))
  with pytest.raises(FileNotFoundError) as caught:
    released.local_path("keras_hub:bert_small_en_uncased")
  message = str(caught.value)
  assert message.startswith(f"keras_hub:bert_small_en_uncased: not in the cache ({tmp_path}/empty/models/keras/"
                            "bert/keras/bert_small_en_uncased/")
  assert "keras_hub.models.BertBackbone.from_preset('bert_small_en_uncased')" in message and "\n" not in message
  folder = os.path.join("models", *handle.removeprefix("kaggle://").split("/")).replace("bert_tiny", "bert_small")
  assert message.endswith(f"then copy the folder it fills there, {folder} under that machine's KAGGLEHUB_CACHE "
                          f"cache, to {tmp_path}/empty/{folder} here (or set KAGGLEHUB_CACHE to a cache that holds it)")


def test_a_truncated_safetensors_file_or_a_bad_config_json_is_named(tmp_path):
  header = json.dumps({"embeddings.word_embeddings.weight": {"dtype": "F32", "shape": [2, 3],
                                                             "data_offsets": [0, 24]}}).encode()
  (tmp_path / "model.safetensors").write_bytes(struct.pack("<Q", len(header)) + header + b"\0" * 10)
  with pytest.raises(ValueError, match=f"^{tmp_path / 'model.safetensors'}: tensor embeddings.word_embeddings.weight "
                     f"ends at byte {8 + len(header) + 24} but the file has {8 + len(header) + 10}; the file is "
                     "truncated"):
    convert.read_safetensors(str(tmp_path / "model.safetensors"))
  for text, error in (('{"model_type": "bert", "hidden', "not a JSON config"),
                      ("[1, 2]", "a JSON list, not an object")):
    (tmp_path / "config.json").write_text(text)
    with pytest.raises(ValueError, match=f"^{tmp_path / 'config.json'}: {error}"):
      convert.load_hf(str(tmp_path))


def test_script_on_a_damaged_checkpoint_is_one_line_naming_the_file(tiny_pretrainer, tmp_path):
  """Issue 40 (6): an `ours` checkpoint with a corrupt .index ("block checksum mismatch") or a google-research one
  with its .data cut short was a traceback."""
  import concurrent.futures

  import training_helpers as th

  convert.save_ours(tiny_converted(tiny_pretrainer), str(tmp_path / "ours"))
  th.damage_checkpoint(tmp_path / "ours" / "encoder" / "ckpt-1", "index")
  convert.save_tf1(tiny_converted(tiny_pretrainer), str(tmp_path / "tf1"))
  th.damage_checkpoint(tmp_path / "tf1" / "bert_model.ckpt", "data")
  script = os.path.join(REPO, "scripts", "convert_checkpoint.py")
  runs = [("ours", "hf"), ("tf1", "ours")]
  with concurrent.futures.ThreadPoolExecutor(2) as pool:
    ours, tf1 = pool.map(lambda run: th.run_python([
        script, f"--input_format={run[0]}", f"--input={tmp_path / run[0]}", f"--output_format={run[1]}",
        f"--output_dir={tmp_path / 'out' / run[0]}"]), runs)
  fix = "copy it again, or write it again with the command that made it, or give another checkpoint"
  for result, line in ((ours, f"error: {tmp_path}/ours/encoder/ckpt-1.index: damaged (block checksum mismatch); {fix}"),
                       (tf1, f"error: {tmp_path}/tf1/bert_model.ckpt.data-00000-of-00001: damaged (truncated: Read "
                             f"less bytes than requested); {fix}")):
    assert (result.returncode, result.stderr.strip().splitlines()[-1]) == (1, line), result.stderr[-3000:]
    assert "Traceback" not in result.stderr
  assert not os.path.exists(tmp_path / "out")


def test_script_refuses_a_vocabulary_without_cls_and_sep(tiny_pretrainer, tmp_path):
  """Issue 40 (6): convert_checkpoint.py wrote such a model and exited 0, though no script can use it (fine-tuning,
  extraction and export refuse it) and transformers' BertTokenizer would give [CLS] the id of [UNK]. [PAD] and
  [MASK] may be missing: a fine-tuned model's vocabulary needs neither."""
  import training_helpers as th

  convert.save_ours(tiny_converted(tiny_pretrainer), str(tmp_path / "ours"))
  size = tiny_pretrainer.config.vocab_size
  tokens = ["[PAD]", "[UNK]", "[cls]", "[sep]", "[MASK]"] + [f"w{i}" for i in range(size - 5)]
  vocab = tmp_path / "vocab.txt"
  vocab.write_text("\n".join(tokens) + "\n")
  result = th.run_python([os.path.join(REPO, "scripts", "convert_checkpoint.py"), "--input_format=ours",
                          f"--input={tmp_path / 'ours'}", f"--vocab_file={vocab}", "--output_format=hf",
                          f"--output_dir={tmp_path / 'out'}"])
  assert (result.returncode, result.stderr.strip().splitlines()[-1]) == (
      1, f"error: {vocab}: has no [CLS] [SEP], which BERT needs; give the vocab.txt the model was trained with (every "
         "BERT vocabulary holds them)"), result.stderr[-3000:]
  assert "Traceback" not in result.stderr
  assert not os.path.exists(tmp_path / "out")
  vocab.write_text("\n".join(["[pad]", "[UNK]", "[CLS]", "[SEP]", "[mask]"] + tokens[5:]) + "\n")
  converted = convert.Converted(tiny_pretrainer.config, tiny_pretrainer.encoder, vocab_file=str(vocab))
  assert convert.checked_vocab(converted) is converted
