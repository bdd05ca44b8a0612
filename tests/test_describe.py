"""bert_tf.data.describe: records checked against the vocabulary they are decoded with."""

import pytest

import training_helpers as th
from bert_tf import fileio
from bert_tf.data import describe, tokenization


def _vocab(tmp_path, tokens):
  path = tmp_path / "vocab.txt"
  path.write_text("\n".join(tokens) + "\n")
  return str(path), tokenization.load_vocab(str(path))


def test_records_are_checked_against_the_vocabulary(tmp_path):
  files = fileio.expand_globs(th.write_records(tmp_path / "data", num_files=2, per_file=3))  # ids < 99, [CLS] = 2
  path, vocab = _vocab(tmp_path, th.SPECIAL + [f"w{i}" for i in range(th.VOCAB - len(th.SPECIAL))])
  describe.check_vocabulary(files, vocab, path)  # the records' own vocabulary
  path, vocab = _vocab(tmp_path, th.SPECIAL + [f"w{i}" for i in range(40)])
  with pytest.raises(ValueError, match=r"records hold token id 9\d but --vocab_file=.*vocab.txt has 45 tokens; "
                                       "pass the vocabulary the records were made with"):
    describe.check_vocabulary(files, vocab, path)
  # As many tokens, other ids: BERT's vocabularies start [PAD], [unused0], ...
  path, vocab = _vocab(tmp_path, ["[PAD]", "[unused0]", "[unused1]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
                       + [f"w{i}" for i in range(th.VOCAB - 7)])
  with pytest.raises(ValueError, match=r"the first record starts with id 2, which is '\[unused1\]' in "
                                       r"--vocab_file=.*, not \[CLS\] \(id 4\); pass the vocabulary"):
    describe.check_vocabulary(files, vocab, path)
