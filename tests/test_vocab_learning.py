"""Tests for bert_tf.data.vocab_learning and scripts/learn_vocab.py."""

from __future__ import annotations

import gzip
import os
import pathlib
import subprocess
import sys

import pytest

from bert_tf.data import tokenization as tk
from bert_tf.data import vocab_learning as vl
from bert_tf.data.corpus import default_corpus_text
from bert_tf.data.graph_tokenizer import GraphTokenizer

SCRIPT = pathlib.Path(__file__).resolve().parents[1] / "scripts" / "learn_vocab.py"


@pytest.fixture(scope="module")
def corpus_lines() -> list[str]:
  return default_corpus_text().split("\n")


@pytest.fixture(scope="module")
def learned(corpus_lines) -> list[str]:
  return vl.learn_wordpiece_vocab(corpus_lines, 1000, do_lower_case=True)


def test_learned_vocab_layout_and_size(learned):
  assert learned[:5] == ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
  assert len(set(learned)) == len(learned)
  # The learner stops within its 5 % slack below the request (measured: 962 of 1000).
  assert 950 <= len(learned) <= 1000
  assert all(token and token == token.strip() for token in learned)
  for token in ("the", "##s", "python", "a", "##a"):
    assert token in learned


def test_learned_vocab_covers_its_training_text(learned, corpus_lines):
  """Every character of every word of up to 50 characters is in the vocabulary, alone and as "##c", so [UNK]
  can only come from a character seen nowhere but in longer words; on this text there are none (measured 0.0).
  """
  tokenizer = tk.FullTokenizer(learned, do_lower_case=True)
  assert vl.unk_rate(tokenizer, corpus_lines) < 1e-4
  graph = GraphTokenizer(learned, do_lower_case=True)
  assert vl.unk_rate(graph, corpus_lines[:500]) == vl.unk_rate(tokenizer, corpus_lines[:500])
  words = sum(vl.count_words(corpus_lines, True).values())
  pieces = sum(len(tokenizer.tokenize(line)) for line in corpus_lines)
  assert pieces < 1.5 * words  # Learned pieces, not mostly single characters (measured 1.23).


def test_unk_rate_counts_pieces():
  tokenizer = tk.FullTokenizer(["[PAD]", "[UNK]", "a", "##b"])
  assert vl.unk_rate(tokenizer, ["ab c", "ab", ""]) == pytest.approx(1 / 5)
  assert vl.unk_rate(tokenizer, []) == 0.0


def test_trim_keeps_characters():
  vocab = ["[PAD]", "[UNK]", "a", "ab", "ba", "##b", "aa"]
  assert vl._trim(vocab, 5, 2) == ["[PAD]", "[UNK]", "a", "ab", "##b"]
  assert vl._trim(vocab, 7, 2) == vocab


def test_bad_vocab_size_and_empty_input():
  with pytest.raises(ValueError, match="--vocab_size=104 is too small"):
    vl.learn_wordpiece_vocab(["some text"], 104, True)
  with pytest.raises(ValueError, match="no words"):
    vl.learn_wordpiece_vocab(["", "  \t"], 1000, True)


def run_script(*args: str) -> subprocess.CompletedProcess:
  return subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True, timeout=300)


def test_script_learns_and_reports(tmp_path):
  corpus = tmp_path / "corpus.txt.gz"  # The first 1,500 lines of the embedded corpus, gzipped.
  lines = default_corpus_text().split("\n")[:1500]
  with gzip.open(corpus, "wt", encoding="utf-8") as f:
    f.write("\n".join(lines) + "\n")
  vocab_file = tmp_path / "out" / "vocab.txt"
  result = run_script(f"--input_file={corpus}", f"--vocab_file={vocab_file}", "--vocab_size=50")
  assert result.returncode != 0
  assert "--vocab_size=50 is too small" in result.stderr
  assert not vocab_file.exists()
  result = run_script(f"--input_file={tmp_path}/missing.txt,{corpus}", f"--vocab_file={vocab_file}")
  assert result.returncode != 0
  assert "missing.txt' matches no file" in result.stderr
  result = run_script(f"--input_file={tmp_path}/*.gz", f"--vocab_file={vocab_file}", "--vocab_size=400",
                      "--nodo_lower_case")
  assert result.returncode == 0, result.stderr[-3000:]
  vocab = tk.load_vocab(str(vocab_file))
  assert f"tokens (asked for at most 400) from {sum(1 for line in lines if line)} lines" in result.stdout
  assert "[UNK] rate on the training text: 0.0" in result.stdout
  assert 380 <= len(vocab) <= 400 and list(vocab)[:5] == list(tk.SPECIAL_TOKENS)
  assert "The" in vocab  # Cased.


# -- As a user meets it: the script run from its folder, relative paths, the user's environment ----------------


def run_script_in(folder, *args: str) -> subprocess.CompletedProcess:
  # The user's environment: without a TF_CPP_MIN_LOG_LEVEL that this test process may have been given.
  env = {k: v for k, v in os.environ.items() if k != "TF_CPP_MIN_LOG_LEVEL"}
  return subprocess.run([sys.executable, str(SCRIPT), *args], cwd=folder, capture_output=True, text=True,
                        timeout=300, env=env)


TF_NOISE = ("cuInit", "oneDNN", "AVX", "cpu_feature_guard", "cuda", "absl::InitializeLog")


def test_script_stderr_holds_no_tensorflow_start_up_noise(tmp_path):
  (tmp_path / "corpus.txt").write_text("\n".join(default_corpus_text().split("\n")[:300]), encoding="utf-8")
  result = run_script_in(tmp_path, "--input_file=corpus.txt", "--vocab_file=vocab.txt", "--vocab_size=200")
  assert result.returncode == 0, result.stderr[-3000:]
  assert result.stdout.startswith("wrote vocab.txt: ")
  assert not [word for word in TF_NOISE if word in result.stderr], result.stderr


_GZIPPED = gzip.compress("".join(f"line {i} of a corpus\n" for i in range(5000)).encode(), mtime=0)
_CORRUPT = _GZIPPED[:100] + bytes(b ^ 0xFF for b in _GZIPPED[100:110]) + _GZIPPED[110:]


@pytest.mark.parametrize("input_file,content,expected", [
    ("texts", None, "--input_file=texts is a directory: give files or globs, e.g. texts/*.txt"),
    # Issue 40 (6): gzip's EOFError and zlib.error, naming no file, were tracebacks.
    ("cut.txt.gz", _GZIPPED[:len(_GZIPPED) // 2], "cut.txt.gz: truncated (its gzip stream ends before the end marker: "
     "a copy or download cut short); copy or download it again"),
    ("corrupt.txt.gz", _CORRUPT, "corrupt.txt.gz: a damaged gzip file (Error -3 while decompressing data: invalid "
     "distance too far back); copy or download it again"),
    ("empty.txt", b"", "empty.txt: no words to learn a vocabulary from (the text is empty or blank); nothing was "
     "written"),
    ("blank.txt", b" \n\r\n\t\n", "blank.txt: no words to learn a vocabulary from (the text is empty or blank); "
     "nothing was written"),
    ("latin1.txt", b"fine\ncaf\xe9\n", "latin1.txt:2: not valid UTF-8 (invalid continuation byte at byte 3 of the "
     "line); re-encode the file as UTF-8"),
])
def test_script_refuses_bad_inputs_naming_them(tmp_path, input_file, content, expected):
  if content is None:
    (tmp_path / input_file).mkdir()
  else:
    (tmp_path / input_file).write_bytes(content)
  result = run_script_in(tmp_path, f"--input_file={input_file}", "--vocab_file=out/vocab.txt")
  assert result.returncode == 1
  assert "Traceback" not in result.stderr
  assert result.stderr.splitlines() == [f"error: {expected}"]
  assert not (tmp_path / "out").exists()


def test_learning_a_vocabulary_starts_no_tensorflow_and_learns_what_tensorflow_texts_import_learns():
  """tensorflow-text's learner is loaded from its file (`_learner`): importing its package would start TensorFlow
  (seconds) for a pure-Python algorithm. In a fresh process: no TensorFlow, and the vocabulary equals the one the
  learner gives when imported by its package name (this process has tensorflow_text loaded)."""
  code = ("import sys\nfrom bert_tf.data import vocab_learning as vl\n"
          "lines = sys.stdin.read().splitlines()\n"
          "vocab = vl.learn_wordpiece_vocab(lines, 131, True)\n"
          "print('tensorflow' in sys.modules, 'tensorflow_text' in sys.modules)\nprint('\\n'.join(vocab))")
  lines = default_corpus_text().splitlines()[:400]
  result = subprocess.run([sys.executable, "-c", code], input="\n".join(lines), capture_output=True, text=True,
                          cwd=os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
  assert result.returncode == 0, result.stderr[-2000:]
  loaded, *vocab = result.stdout.splitlines()
  assert loaded == "False False"
  import tensorflow_text  # noqa: F401  the learner by its package name from here on
  assert vl._learner().__name__ == "tensorflow_text.tools.wordpiece_vocab.wordpiece_tokenizer_learner_lib"
  assert vocab == vl.learn_wordpiece_vocab(lines, 131, True) and len(vocab) > 100
