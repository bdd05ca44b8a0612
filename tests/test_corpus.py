"""The embedded default corpus and the text input reader."""

import gzip

import pytest

from bert_tf.data import corpus, text_io


def test_embedded_corpus_is_79_documents_of_real_prose():
  documents = corpus.default_corpus_documents()
  assert len(documents) == 79
  words = sum(len(s.split()) for d in documents for s in d)
  assert 60_000 < words < 70_000
  text = corpus.default_corpus_text()
  assert text.count("\n\n") == 78 and "\n\n\n" not in text and text.endswith("\n")
  assert "Assert statements are a convenient way to insert debugging assertions into a program:" in text


def test_sentence_splitting():
  assert corpus.split_sentences("It ends. Then (another) one! Is it 3.14? e.g. not this.") == [
      "It ends.", "Then (another) one!", "Is it 3.14? e.g. not this."]
  assert corpus.document_sentences("Title\n*****\n\nProse line one\ncontinues here.  Next.\n\n   code = 1\n") == [
      "Title", "Prose line one continues here.", "Next.", "code = 1"]


def test_lines_plain_and_gzip_are_the_same(tmp_path):
  text = "first line \r\n\n  second\u00a0\nlast without newline"
  (tmp_path / "a.txt").write_text(text, encoding="utf-8")
  with gzip.open(tmp_path / "a.txt.gz", "wt", encoding="utf-8") as f:
    f.write(text)
  expected = [(1, "first line"), (2, ""), (3, "second"), (4, "last without newline")]
  assert list(text_io.iter_lines(str(tmp_path / "a.txt"))) == expected
  assert list(text_io.iter_lines(str(tmp_path / "a.txt.gz"))) == expected
  assert text_io.uncompressed_size(str(tmp_path / "a.txt.gz")) == len(text.encode())


def test_undecodable_line_is_named(tmp_path):
  path = tmp_path / "bad.txt"
  path.write_bytes(b"ok\nok\nbad \xff byte\n")
  with pytest.raises(text_io.CorpusDecodeError, match=r"bad.txt:3: not valid UTF-8"):
    list(text_io.iter_lines(str(path)))


def test_missing_file_is_named(tmp_path):
  with pytest.raises(FileNotFoundError, match="missing.txt"):
    list(text_io.iter_lines(str(tmp_path / "missing.txt")))


def test_carriage_returns_are_dropped_as_the_references_reader_does(tmp_path):
  """google-research reads with tf.gfile.GFile(path, "r").readline(), whose C++ line reader skips every "\\r":
  "\\r\\n" ends a line as "\\n" does and a lone "\\r" joins its neighbours. Measured here on TF itself."""
  import tensorflow as tf

  data = b"ab\rcd ef\r\ngh\r\r\n\r\n  \r \nlast\rline\rno newline\r"
  path = tmp_path / "cr.txt"
  path.write_bytes(data)
  reference = []
  with tf.io.gfile.GFile(str(path), "r") as reader:
    while line := reader.readline():
      reference.append(line.strip())
  ours = [line for _, line in text_io.iter_lines(str(path))]
  assert ours == reference == ["abcd ef", "gh", "", "", "lastlineno newline"]


def test_directories_are_refused_naming_the_flag(tmp_path, monkeypatch):
  monkeypatch.chdir(tmp_path)
  (tmp_path / "texts").mkdir()
  (tmp_path / "a.txt").write_text("a\n")
  with pytest.raises(IsADirectoryError, match=r"^--input_file=texts is a directory: give files or globs, e.g. "
                     r"texts/\*\.txt$"):
    text_io.expand_input_files("a.txt,texts")
  with pytest.raises(IsADirectoryError, match=r"^--input_file: '\*' matches the directory texts: "):
    text_io.expand_input_files("*")
  assert text_io.expand_input_files("*.txt") == ["a.txt"]
