"""bert_tf/training/driver.py: a task written outside the repository (a package in a temporary folder, as
docs/adding_a_task.md builds it) registers itself, and `driver.run_finetuning` trains, evaluates, predicts and
exports it, and its script (`cli.finetuning_main`) runs it, without an edit of bert_tf/ or scripts/.

The toy task: does a sentence hold the word "red"? Files of "label<TAB>sentence" lines, a binary head on the pooled
[CLS] of a tiny random encoder (1 layer, hidden 18, max_seq_length 15), 37 training sentences, 11 dev, 7 test."""

from __future__ import annotations

import importlib
import json
import os
import subprocess
import sys
import textwrap

import keras
import numpy as np
import pytest
import tensorflow as tf

import training_helpers as th
from bert_tf import registry
from bert_tf.config import BertConfig

T = 15  # max_seq_length
WORD = "red"
OTHER_WORDS = ("a", "the", "big", "small", "car", "dog", "house", "ball", "runs", "sits", "is", "near", "old", "new",
               "blue", "green", "fast", "slow", "tree", "cat")
SPLITS = {"train": 37, "dev": 11, "test": 7}

# The toy task's package, as docs/adding_a_task.md writes it: __init__.py registers the task (no TensorFlow
# import), serving.py exports it, and task.py holds what a real task splits into data.py, model.py, folder.py and
# run.py.
TOY_INIT = '''
"""Toy: does a sentence hold the word "red"? (tests/test_driver.py)"""

from __future__ import annotations

from bert_tf import registry


@registry.register_task
class ToyContains(registry.Task, name="toy_contains", model_dir="toy_model", settings_name="toy.json",
                  description="toy model", hf_class="BertForSequenceClassification", served_name="toy_contains",
                  exporter="export_toy"):
  """scripts/run_toy_contains.py; its export is serving.py's export_toy."""
'''

TOY_TASK = '''
"""The toy task's reader, features, head, metric, folder and hooks on the driver."""

from __future__ import annotations

import dataclasses
import os

import numpy as np
import tensorflow as tf

from bert_tf import fileio
from bert_tf.data import records
from bert_tf.tasks.common import features
from bert_tf.tasks.common.folder import ModelFolder
from bert_tf.tasks.common.head import EncoderHeadModel
from bert_tf.tasks.common.task import PerExampleTask
from bert_tf.training import driver, finetuning, run_identity

LABELS = ("no", "yes")
MODEL_DIR, SETTINGS_NAME = "toy_model", "toy.json"
PREDICTIONS_FILE = "test_predictions.tsv"
METRIC_NAMES = ("accuracy", finetuning.LOSS)  # the headline first


# -- Reader: <data_dir>/<split>.tsv, "label<TAB>sentence" a line ---------------------------------------------


@dataclasses.dataclass
class Split:
  path: str
  sentences: list
  labels: list  # int, an index of LABELS


def read_split(data_dir: str, split: str) -> Split:
  path = os.path.join(data_dir, f"{split}.tsv")
  if not fileio.exists(path):
    raise FileNotFoundError(f"{path}: no such file; --data_dir holds train.tsv, dev.tsv and test.tsv")
  sentences, labels = [], []
  with fileio.open_file(path, "rb") as f:
    for number, line in enumerate(f.read().decode("utf-8").splitlines(), 1):
      label, _, sentence = line.partition("\\t")
      if label not in LABELS:
        raise ValueError(f"{path}:{number}: label {label!r}; give one of {', '.join(LABELS)}, a tab, the sentence")
      sentences.append(sentence)
      labels.append(LABELS.index(label))
  return Split(path, sentences, labels)


# -- Features: one record per sentence, cached under <features_dir>/toy/ --------------------------------------

def feature_file(config, split: str, data: Split, tokenizer) -> str:
  key = features.feature_file_key(features.file_fingerprint(data.path), features.file_fingerprint(config.vocab_file),
                                  config.do_lower_case, config.max_seq_length)
  path = f"{config.features_dir}/toy/{split}-{key}.tfrecord"
  if fileio.exists(path):
    return path
  writer = records.TFRecordFileWriter(path)
  for sentence, label in zip(data.sentences, data.labels, strict=True):
    encoded = features.encode(tokenizer, sentence, None, config.max_seq_length)
    values = {name: getattr(encoded, name) for name in features.PER_TOKEN_INPUTS}
    values.update(label_ids=[label], is_real_example=[1])
    example = tf.train.Example(features=tf.train.Features(feature={
        name: tf.train.Feature(int64_list=tf.train.Int64List(value=v)) for name, v in values.items()}))
    writer.write(example.SerializeToString())
  writer.close()
  return path


def dataset(path: str, batch_size: int, max_seq_length: int, is_training: bool, input_context=None, seed=12345,
            dynamic_padding=True, length_multiple=1) -> tf.data.Dataset:
  """Batches of int32 input_ids, input_mask, segment_ids [B, T'] and label_ids, is_real_example [B]."""
  spec = {name: tf.io.FixedLenFeature([max_seq_length], tf.int64) for name in features.PER_TOKEN_INPUTS}
  spec.update({name: tf.io.FixedLenFeature([], tf.int64) for name in ("label_ids", "is_real_example")})
  return features.feature_dataset(path, spec, lambda batch: {k: tf.cast(v, tf.int32) for k, v in batch.items()},
                                  batch_size, max_seq_length, is_training, input_context, seed, dynamic_padding,
                                  pad_to_batch=not is_training, length_multiple=length_multiple)


# -- Head and the trainer's task ------------------------------------------------------------------------------


class ToyModel(EncoderHeadModel):
  """The encoder, dropout and a dense layer on its pooled [CLS]: int32 [B, T] inputs -> logits [B, 2]."""

  def __init__(self, config, dropout=None, encoder=None, dtype=None, **kwargs):
    super().__init__(config, dropout, encoder, dtype=dtype, **kwargs)
    self.toy_dropout, self.toy_output = self.output_layers("toy_dropout", "toy_output", len(LABELS), dtype)

  def call(self, inputs, training=None):
    pooled = self.encoder.pooled_output(inputs, training=training)  # [B, H]
    return self.toy_output(self.toy_dropout(pooled, training=training))  # [B, 2]


class ToyTask(PerExampleTask):
  """Cross-entropy over the two labels and accuracy: PerExampleTask's; its training batches: `dataset`'s."""

  read_file = staticmethod(dataset)

  def __init__(self, config, train_file, **kwargs):
    super().__init__(config.finetuning.bert_config, len(LABELS), train_file, config.max_seq_length, **kwargs)

  def build_model(self):
    return ToyModel(self.bert_config, dtype=self.dtype)


# -- The model's folder: <output_dir>/toy_model/ --------------------------------------------------------------

FOLDER = ModelFolder(MODEL_DIR, SETTINGS_NAME, "run_toy_contains.py")


def load_model(directory: str) -> ToyModel:
  """The float32 model of the folder (call under the strategy's scope)."""
  return FOLDER.restore(ToyModel(FOLDER.bert_config(directory), dtype="float32"), directory)


# -- The run: config and hooks on the driver ------------------------------------------------------------------


@dataclasses.dataclass
class ToyConfig(finetuning.TaskRunConfig):
  data_dir: str
  model_name: str | None = dataclasses.field(default="toy_contains", kw_only=True)

  def validate(self) -> None:
    self.finetuning.validate()
    if not (self.do_train or self.do_eval or self.do_predict):
      raise ValueError("nothing to do: pass at least one of --do_train, --do_eval, --do_predict")
    self.check_length_and_vocab()
    self.finetuning.check_evaluation(self.do_train, self.do_eval, METRIC_NAMES)
    if not self.do_train and not FOLDER.is_model_dir(self.finetuning.init_checkpoint):
      raise ValueError(f"--do_eval/--do_predict without --do_train need --init_checkpoint=<output_dir>/{MODEL_DIR}")


class ToyRun(driver.TaskRun):
  model_dir = MODEL_DIR
  outputs = (PREDICTIONS_FILE,)

  def read_inputs(self, say) -> None:
    wanted = {"train": self.config.do_train, "dev": self.config.do_eval, "test": self.config.do_predict}
    self.inputs = {split: read_split(self.config.data_dir, split) for split, on in wanted.items() if on}

  def metric_names(self):
    return METRIC_NAMES

  def run_identity(self):
    settings = {"train_file": run_identity.file_entry(self.inputs["train"].path),
                "vocab_file": run_identity.file_entry(self.config.vocab_file),
                "max_seq_length": self.config.max_seq_length, "do_lower_case": self.config.do_lower_case,
                **run_identity.finetuning_settings(self.ft)}
    return run_identity.RunIdentity("toy_contains", settings, {"num_train_epochs": self.ft.num_train_epochs})

  def training(self, context):
    path = feature_file(self.config, "train", self.inputs["train"], context.tokenizer)
    task = ToyTask(self.config, path, seed=self.ft.seed, dtype=self.ft.dtype,
                   dynamic_padding=self.config.dynamic_padding_on, length_multiple=self.config.length_multiple)
    count = len(self.inputs["train"].sentences)
    return driver.Training(task, count, head=(SETTINGS_NAME, {}), facts={"train_examples": count})

  def logits(self, model, split: str, context) -> np.ndarray:
    """float32 [N, 2], in the file's order."""
    path = feature_file(self.config, split, self.inputs[split], context.tokenizer)
    batches = dataset(path, finetuning.eval_batch_size_for(self.ft.eval_batch_size, context.strategy),
                      self.config.max_seq_length, False)
    return finetuning.predict(model, batches, context.strategy, description=f"toy {split}")

  def metrics(self, logits, split: str) -> dict:
    labels = np.array(self.inputs[split].labels, np.int32)
    loss = finetuning.eval_loss(ToyTask(self.config, None),
                                {"label_ids": labels, "is_real_example": np.ones_like(labels)}, logits)
    return {"accuracy": float(np.mean(logits.argmax(-1) == labels)), finetuning.LOSS: loss,
            f"{split}_examples": len(labels)}

  def evaluate_while_training(self, model, context):
    return self.metrics(self.logits(model, "dev", context), "dev")

  def save(self, model, directory, context):
    settings = {"max_seq_length": self.config.max_seq_length, "do_lower_case": self.config.do_lower_case}
    FOLDER.save_model(model, settings, self.config.vocab_file, directory)

  def load(self, directory, context):
    return load_model(directory)

  def evaluate(self, model, model_dir, context):
    values = {**self.metrics(self.logits(model, "dev", context), "dev"), **context.training_facts()}
    if context.chief:
      driver.write_results(self.config.output_dir, values)
    context.say(f"toy dev: accuracy {values['accuracy']:.4f}")
    context.summary["eval"] = values

  def predict(self, model, model_dir, context):
    probabilities = tf.nn.softmax(self.logits(model, "test", context)).numpy()
    if context.chief:
      lines = [f"{LABELS[row.argmax()]}\\t{row[1]:.6f}\\n" for row in probabilities]
      path = os.path.join(self.config.output_dir, PREDICTIONS_FILE)
      fileio.write_text_atomic(path, "label\\tprobability_yes\\n" + "".join(lines))
      context.summary["predictions"] = path

  def export(self, model_dir, context):
    from toy_contains import serving

    return serving.export_toy(model_dir, self.config.export_dir, self.config.model_name)
'''

TOY_SERVING = '''
"""The toy task's SavedModel: raw text in, through the shared export path."""

from __future__ import annotations

import tensorflow as tf

from bert_tf.export import serving
from bert_tf.model.encoder import padding_skipped
from bert_tf.tasks.common import features
from bert_tf.tasks.common.serving import TaskServer, model_folder
from toy_contains import task


class ToyServer(TaskServer):
  def __init__(self, model, vocab_file: str, settings: dict):
    super().__init__("toy_server", model, vocab_file, settings["do_lower_case"], needs="toy sequences")
    self._max_seq_length = settings["max_seq_length"]
    self.serve_text = tf.function(self._serve_text, input_signature=[tf.TensorSpec([None], tf.string, name="sentence")])

  def _serve_text(self, sentence):
    encoded = serving.trim_padding(features.encode_graph(self.tokenizer, sentence, None, self._max_seq_length))
    with padding_skipped(self._model):
      logits = tf.cast(self._model(encoded, training=False), tf.float32)  # [B, 2]
    label_id = tf.argmax(logits, axis=-1, output_type=tf.int32)
    return {"probabilities": tf.nn.softmax(logits), "label_id": label_id, "label": tf.gather(task.LABELS, label_id)}


def export_toy(model_dir: str, export_dir: str, model_name: str = "toy_contains", version=None) -> str:
  model_dir, settings, vocab_file = model_folder(model_dir, export_dir, model_name, version, task.FOLDER)
  server = ToyServer(task.load_model(model_dir), vocab_file, settings)
  manifest = {"task": "toy_contains", "task_kind": "classification", "labels": list(task.LABELS), "is_pair": False,
              "max_seq_length": settings["max_seq_length"]}
  warmup = [{"sentence": "a red car"}, {"sentence": "the dog sits"}]
  return server.export(export_dir, model_name, version, warmup, manifest, vocab_file)
'''

# scripts/run_toy_contains.py as the guide writes it (here in the temporary folder, beside the package).
TOY_SCRIPT = '''
"""Fine-tunes BERT on the toy task: does a sentence hold the word "red"?"""

import toy_contains  # noqa: F401  Registers the task, which define_finetuning_flags looks up.
from absl import flags

from bert_tf import cli

FLAGS = flags.FLAGS
flags.DEFINE_string("data_dir", None, "A folder of train.tsv, dev.tsv and test.tsv: label<TAB>sentence lines.")
cli.define_finetuning_flags("toy_contains", unit="sentence", do_train="Fine-tune on train.tsv.",
                            do_eval="Evaluate (accuracy) on dev.tsv.", do_predict="Predict test.tsv.",
                            model_name="toy_contains")


def _config():
  from toy_contains import task

  return cli.finetuning_config(task.ToyConfig, require={"data_dir": "the folder of train.tsv, dev.tsv, test.tsv"},
                               data_dir=FLAGS.data_dir)


def _run(config, say):
  from toy_contains import task

  from bert_tf.training import driver

  return driver.run_finetuning(task.ToyRun(config), say=say)


if __name__ == "__main__":
  cli.run(cli.finetuning_main(_config, _run))
'''


def repository_files() -> dict[str, tuple[int, int]]:
  """{path relative to the repository: (mtime_ns, size)} of every file in it but .git/ and .venv/ (ignored
  ones too: a run writing into out/ there would not show in `git status`)."""
  found = {}
  for folder, folders, files in os.walk(th.REPO):
    folders[:] = [name for name in folders if os.path.join(folder, name) not in
                  (os.path.join(th.REPO, ".git"), os.path.join(th.REPO, ".venv"))]
    for name in files:
      stat = os.stat(os.path.join(folder, name))
      found[os.path.relpath(os.path.join(folder, name), th.REPO)] = (stat.st_mtime_ns, stat.st_size)
  return found


def sentences(count: int, seed: int) -> list[tuple[str, str]]:
  """(label, sentence) pairs, alternately with and without WORD among 3 to 8 words."""
  rng = np.random.default_rng(seed)
  out = []
  for i in range(count):
    words = list(rng.choice(OTHER_WORDS, size=int(rng.integers(3, 9))))
    if i % 2 == 0:
      words.insert(int(rng.integers(0, len(words) + 1)), WORD)
    out.append(("yes" if i % 2 == 0 else "no", " ".join(words)))
  return out


def write_workdir(directory) -> None:
  """model/ (a tiny random encoder in the pretraining hand-off layout and its vocab.txt) and data/ (the splits)."""
  from bert_tf.model import checkpoints
  from bert_tf.model.encoder import BertEncoder

  tokens = [*th.SPECIAL, WORD, *OTHER_WORDS]
  config = BertConfig.from_preset("tiny", vocab_size=len(tokens), num_hidden_layers=1, hidden_size=18,
                                  num_attention_heads=3, intermediate_size=37, max_position_embeddings=T + 2,
                                  hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
  keras.utils.set_random_seed(7)
  checkpoints.export_encoder(BertEncoder(config), config, str(directory / "model"))
  (directory / "model" / "vocab.txt").write_text("\n".join(tokens) + "\n")
  (directory / "data").mkdir()
  for seed, (split, count) in enumerate(SPLITS.items()):
    (directory / "data" / f"{split}.tsv").write_text("".join(f"{label}\t{text}\n"
                                                             for label, text in sentences(count, seed)))


@pytest.fixture(scope="module")
def toy(tmp_path_factory):
  """The toy package written into a temporary folder and imported (it registers itself); afterwards the registry,
  sys.path and sys.modules hold only what they held before, so other tests see the real tasks alone."""
  root = tmp_path_factory.mktemp("toy_package")
  (root / "toy_contains").mkdir()
  (root / "toy_contains" / "__init__.py").write_text(textwrap.dedent(TOY_INIT).lstrip())
  (root / "toy_contains" / "task.py").write_text(textwrap.dedent(TOY_TASK).lstrip())
  (root / "toy_contains" / "serving.py").write_text(textwrap.dedent(TOY_SERVING).lstrip())
  (root / "run_toy_contains.py").write_text(textwrap.dedent(TOY_SCRIPT).lstrip())
  real = [task.name for task in registry.tasks()]  # registered first, into the table that is restored afterwards
  with pytest.MonkeyPatch.context() as patch:
    patch.setattr(registry, "_TASKS", dict(registry._TASKS))  # pylint: disable=protected-access
    patch.syspath_prepend(str(root))
    package = importlib.import_module("toy_contains")
    yield {"root": root, "package": package, "task": importlib.import_module("toy_contains.task"), "real": real}
  for name in [name for name in sys.modules if name.split(".")[0] == "toy_contains"]:
    del sys.modules[name]


@pytest.fixture(scope="module")
def run(toy, tmp_path_factory):
  """The toy task trained, evaluated, predicted and exported through `driver.run_finetuning` in a working folder
  of its own (relative paths, as a user runs it), and the repository's files before and after."""
  from bert_tf.training import driver, finetuning

  directory = tmp_path_factory.mktemp("toy_run")
  write_workdir(directory)
  before = repository_files()
  lines = []
  with pytest.MonkeyPatch.context() as patch:
    patch.chdir(directory)
    ft = finetuning.FinetuningConfig(
        output_dir="out", bert_config=finetuning.bert_config_for(None, "model"), init_checkpoint="model",
        train_batch_size=4, eval_batch_size=3, learning_rate=3e-3, num_train_epochs=6, warmup_proportion=0.1,
        save_checkpoints_steps=20, steps_per_loop=5, log_steps=20, distribution_strategy="one_device", num_gpus=0)
    config = toy["task"].ToyConfig(data_dir="data", finetuning=ft, vocab_file="model/vocab.txt", max_seq_length=T,
                                   do_train=True, do_eval=True, do_predict=True, export_dir="export")
    summary = driver.run_finetuning(toy["task"].ToyRun(config), say=lines.append)
  return {"dir": directory, "summary": summary, "lines": lines, "repository_before": before,
          "repository_after": repository_files()}


def _labels(directory, split):
  return [line.split("\t")[0] for line in (directory / "data" / f"{split}.tsv").read_text().splitlines()]


def test_a_task_package_outside_the_repository_registers_and_lists_with_the_real_tasks(toy):
  found = registry.get("toy_contains")
  assert found is toy["package"].ToyContains and found.__module__ == "toy_contains"
  assert "swag" in toy["real"] and [t.name for t in registry.tasks()] == sorted([*toy["real"], "toy_contains"])
  assert found.scripts() == ("run_toy_contains", "export_toy_contains") and found.hf_head() is None


def test_the_driver_trains_evaluates_predicts_and_exports_it(run):
  out, summary = run["dir"] / "out", run["summary"]
  assert summary["train_examples"] == 37 and summary["train_steps"] == int(37 / 4 * 6)
  assert sorted(os.listdir(out / "toy_model")) == ["bert_config.json", "model.data-00000-of-00001", "model.index",
                                                    "toy.json", "vocab.txt"]
  results = json.loads((out / "eval_results.json").read_text())
  assert results["dev_examples"] == 11 and results["train_steps"] == summary["train_steps"]
  # Dev's majority class is "yes", 6 of 11: the toy learnt the word, every sentence right (the probabilities of
  # the right labels are about 0.95, far from 0.5, so this does not hang on the last bits of the weights).
  assert _labels(run["dir"], "dev").count("yes") == 6
  assert results["accuracy"] == 1.0, results
  assert f"accuracy = {results['accuracy']}\n" in (out / "eval_results.txt").read_text()
  predictions = (out / "test_predictions.tsv").read_text().splitlines()
  assert predictions[0] == "label\tprobability_yes"
  assert [line.split("\t")[0] for line in predictions[1:]] == _labels(run["dir"], "test")  # 7 of 7
  assert summary["export"] == os.path.join("export", "toy_contains", "1")
  assert any(line.startswith("toy dev: accuracy") for line in run["lines"])


def test_the_export_serves_raw_text_as_the_run_predicted(run, toy):
  import tensorflow_text  # noqa: F401  Registers the tokenizer's ops, as TF Serving links them.

  from bert_tf.export import serving

  directory = run["dir"]
  exported = str(directory / run["summary"]["export"])
  manifest = serving.read_manifest(exported)
  assert (manifest["task"], manifest["task_kind"], manifest["labels"]) == ("toy_contains", "classification",
                                                                          ["no", "yes"])
  texts = [line.split("\t", 1)[1] for line in (directory / "data" / "test.tsv").read_text().splitlines()]
  served = tf.saved_model.load(exported).signatures["serving_default"](sentence=tf.constant(texts))
  rows = [line.split("\t") for line in (directory / "out" / "test_predictions.tsv").read_text().splitlines()[1:]]
  assert [label.decode() for label in served["label"].numpy()] == [label for label, _ in rows]
  np.testing.assert_allclose(served["probabilities"].numpy()[:, 1], [float(p) for _, p in rows], atol=2e-6)
  # The registered task's export (what scripts/export_<name>.py calls) finds that version already serving it.
  again = registry.get("toy_contains").export(str(directory / "out" / "toy_model"), str(directory / "export"), None,
                                              None, {}, "model_dir")
  assert again == exported
  # scripts/export.py's lookup (`cli.task_of_model_dir`) knows the folder by its settings file, hf_head.py or not.
  from bert_tf import cli

  task = registry.get("toy_contains")
  assert cli.task_of_model_dir(str(directory / "out" / "toy_model")) == (task, str(directory / "out" / "toy_model"))
  assert cli.task_of_model_dir(str(directory / "out")) == (task, str(directory / "out" / "toy_model"))


def test_the_task_needed_no_file_of_the_repository_and_wrote_none(run, toy):
  """The toy package lives outside the repository (nothing in bert_tf/ or scripts/ names it), and no file the run
  wrote in its working folder appeared or changed in the repository meanwhile. (Files are compared by name: other
  processes may edit the checkout while the tests run.)"""
  assert not os.path.abspath(toy["package"].__file__).startswith(th.REPO + os.sep)
  written = {name for _, _, files in os.walk(run["dir"]) for name in files} - {"vocab.txt", "bert_config.json"}
  assert {"eval_results.json", "test_predictions.tsv", "toy.json", "saved_model.pb"} <= written
  before, after = run["repository_before"], run["repository_after"]
  changed = [path for path, stat in after.items() if before.get(path) != stat]
  assert [path for path in changed if os.path.basename(path) in written or "toy" in path] == []
  summary = run["summary"]
  assert [summary[key] for key in ("model_dir", "predictions", "export")] == [
      os.path.join("out", "toy_model"), os.path.join("out", "test_predictions.tsv"),
      os.path.join("export", "toy_contains", "1")]


def test_its_script_evaluates_and_predicts_with_the_fine_tuned_folder(run, toy):
  """scripts/run_<name>.py as the guide writes it (cli.finetuning_main), run as a user runs it: --do_eval and
  --do_predict on the run's toy_model/ give the run's dev results and predictions."""
  script = str(toy["root"] / "run_toy_contains.py")
  env = th.python_env(PYTHONPATH=os.pathsep.join([str(toy["root"]), th.REPO]))
  flags = ["--data_dir=data", "--init_checkpoint=out/toy_model", f"--max_seq_length={T}", "--eval_batch_size=3",
           "--distribution_strategy=one_device", "--do_eval", "--do_predict"]
  done = subprocess.run([sys.executable, script, *flags, "--output_dir=again"], cwd=run["dir"], env=env,
                        capture_output=True, text=True, timeout=240)
  assert done.returncode == 0, done.stderr[-3000:]
  again, out = run["dir"] / "again", run["dir"] / "out"
  assert json.loads((again / "eval_results.json").read_text())["accuracy"] == \
      json.loads((out / "eval_results.json").read_text())["accuracy"]
  assert (again / "test_predictions.tsv").read_text() == (out / "test_predictions.tsv").read_text()
  assert json.loads(done.stdout)["model_dir"] == "out/toy_model"  # the summary, printed by finetuning_main
