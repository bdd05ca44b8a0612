"""bert_tf.tasks.swag.data: the reader on files in the official CSV format (written here, rows of our own), its errors
naming file and line, and the four sequences of an example."""

from __future__ import annotations

import collections
import gzip
import os

import pytest

from bert_tf.data import tokenization
from bert_tf.tasks.common.features import encode
from bert_tf.tasks.swag import data as swag

REAL_VAL = "/work/shared/data/swag/val_first91.csv"  # the first 91 rows of the real val.csv, when present
HEADER = ",video-id,fold-ind,startphrase,sent1,sent2,gold-source,ending0,ending1,ending2,ending3,label"
TEST_HEADER = ",video-id,fold-ind,startphrase,sent1,sent2,gold-source,ending0,ending1,ending2,ending3"
# Three rows as pandas writes them: quoting only where a field holds a comma or a quote, "" for a quote, one
# quoted field with a line break inside; no newline after the last row (as the release).
ROWS = [
    '7,anetv_x1,101,The cat sits. It,The cat sits.,It,gold,"purrs, then sleeps.",barks loudly.,flies away.,'
    'sings "hello".,0',
    '12,lsmdc_y2,55,"A man, tired, waves. He","A man, tired, waves.",He,gen,'
    'runs.,"says ""hi"" to her.",falls.,"jumps\nhigh.",3',
    '3,anetv_z3,9,Rain falls. The,Rain falls.,The,gold,sun sets.,dog naps.,roof leaks.,car stops.,2',
]


def write(path, lines, end=""):
  path = str(path)
  with open(path, "w", encoding="utf-8", newline="") as f:
    f.write("\n".join(lines) + end)
  return path


def test_reads_every_field_of_the_official_layout(tmp_path):
  result = swag.read_examples(write(tmp_path / "train.csv", [HEADER, *ROWS]), has_labels=True)
  assert result.path == str(tmp_path / "train.csv")
  assert result.examples == [
      swag.SwagExample("7", "The cat sits.", "It",
                       ("purrs, then sleeps.", "barks loudly.", "flies away.", 'sings "hello".'), 0),
      swag.SwagExample("12", "A man, tired, waves.", "He", ("runs.", 'says "hi" to her.', "falls.", "jumps\nhigh."),
                       3),
      swag.SwagExample("3", "Rain falls.", "The", ("sun sets.", "dog naps.", "roof leaks.", "car stops."), 2),
  ]
  assert result.examples[1].pairs() == [("A man, tired, waves.", "He runs."),
                                        ("A man, tired, waves.", 'He says "hi" to her.'),
                                        ("A man, tired, waves.", "He falls."),
                                        ("A man, tired, waves.", "He jumps\nhigh.")]


def test_test_file_has_no_label_and_columns_are_found_by_name(tmp_path):
  rows = [row.rsplit(",", 1)[0] for row in ROWS]
  result = swag.read_examples(write(tmp_path / "test.csv", [TEST_HEADER, *rows], end="\r\n"), has_labels=False)
  assert [e.guid for e in result.examples] == ["7", "12", "3"]
  assert [e.label for e in result.examples] == [None] * 3
  assert result.examples[2].endings == ("sun sets.", "dog naps.", "roof leaks.", "car stops.")

  # The same data with the columns in another order, CRLF line ends and a byte-order mark.
  shuffled = "label,sent2,ending3,ending2,ending1,ending0,sent1,"
  lines = [shuffled, "1,She,d.,c.,b.,a.,\"Hi, there.\",41", "0,,four,three,two,one,Alone.,42"]
  path = str(tmp_path / "val.csv")
  with open(path, "w", encoding="utf-8-sig", newline="") as f:
    f.write("\r\n".join(lines) + "\r\n\r\n")
  examples = swag.read_examples(path, has_labels=True).examples
  assert examples == [swag.SwagExample("41", "Hi, there.", "She", ("a.", "b.", "c.", "d."), 1),
                      swag.SwagExample("42", "Alone.", "", ("one", "two", "three", "four"), 0)]
  assert examples[1].pairs()[3] == ("Alone.", " four")  # an empty sent2 adds only a space the tokenizer drops


def test_a_test_file_is_read_with_its_labels_when_it_has_them(tmp_path):
  import json

  os.makedirs(tmp_path / "labelled")
  write(tmp_path / "labelled" / "test.csv", [HEADER, *ROWS])
  assert [e.label for e in swag.read_split(str(tmp_path / "labelled"), "test").examples] == [0, 3, 2]
  # Empty, or Hugging Face's -1: no label (such a file is predicted, not scored).
  write(tmp_path / "labelled" / "test.csv", [HEADER, ROWS[0][:-1] + "-1", ROWS[1][:-1], ROWS[2]])
  assert [e.label for e in swag.read_split(str(tmp_path / "labelled"), "test").examples] == [None, None, 2]
  # JSON lines: the first record says whether the file has labels; then every record gives one.
  record = {"sent1": "a", "sent2": "b", **{f"ending{i}": f"e{i}" for i in range(4)}}
  path = write(tmp_path / "test.jsonl", [json.dumps({**record, "label": 1}), json.dumps({**record, "label": -1})])
  assert [e.label for e in swag.read_examples(path, has_labels=None).examples] == [1, None]
  path = write(tmp_path / "test.jsonl", [json.dumps(record), json.dumps({**record, "label": 1})])
  assert [e.label for e in swag.read_examples(path, has_labels=None).examples] == [None, None]
  path = write(tmp_path / "test.jsonl", [json.dumps({**record, "label": 1}), json.dumps(record)])
  with pytest.raises(ValueError) as raised:
    swag.read_examples(path, has_labels=None)
  assert str(raised.value) == f"{path}:2: no 'label', which the first record has: give every record its label, or none"
  # A label that is neither 0-3 nor "none" is refused as in val.csv.
  write(tmp_path / "labelled" / "test.csv", [HEADER, ROWS[0][:-1] + "7"])
  with pytest.raises(ValueError, match=r"test.csv:2: label '7' is not one of 0-3"):
    swag.read_split(str(tmp_path / "labelled"), "test")


def test_split_paths_and_gzip(tmp_path):
  assert swag.split_path("data", "val") == os.path.join("data", "val.csv")
  with pytest.raises(ValueError, match="'dev' is not a SWAG split; choose one of train, val, test"):
    swag.split_path("data", "dev")
  with gzip.open(tmp_path / "train.csv", "wt", encoding="utf-8", newline="") as f:
    f.write("\n".join([HEADER, *ROWS]))
  assert [e.label for e in swag.read_split(str(tmp_path), "train").examples] == [0, 3, 2]
  with pytest.raises(FileNotFoundError, match=r"test.csv does not exist: --data_dir should be a folder of the "
                     r"SWAG release \(its data/ folder\), which holds train.csv, val.csv, test.csv"):
    swag.read_split(str(tmp_path), "test")


def test_own_files_csv_without_index_and_json_lines(tmp_path):
  import dataclasses
  import json

  expected = swag.read_examples(write(tmp_path / "train.csv", [HEADER, *ROWS]), has_labels=True).examples
  # Only the columns the task reads, no index column: ids are row positions.
  own = "sent1,sent2,ending0,ending1,ending2,ending3,label"
  rows = [",".join(row.split(",")[4:6] + row.split(",")[7:]) for row in ROWS[2:]]
  examples = swag.read_examples(write(tmp_path / "own.csv", [own, *rows]), has_labels=True).examples
  assert examples == [dataclasses.replace(expected[2], guid="0")]
  records = [{"sent1": e.sent1, "sent2": e.sent2, **{f"ending{i}": x for i, x in enumerate(e.endings)},
              "label": e.label, "id": e.guid} for e in expected]
  records[1]["label"] = str(records[1]["label"])  # a label's text reads as the number
  records[2].pop("id")
  os.makedirs(tmp_path / "own")
  path = write(tmp_path / "own" / "train.jsonl", [json.dumps(r) for r in records])
  assert swag.split_path(str(tmp_path / "own"), "train") == path
  assert swag.read_split(str(tmp_path / "own"), "train").examples == expected[:2] + [
      dataclasses.replace(expected[2], guid="2")]
  records[1].pop("ending2")
  write(path, [json.dumps(r) for r in records])
  with pytest.raises(ValueError) as raised:
    swag.read_examples(path, has_labels=True)
  assert str(raised.value) == (f"{path}:2: no column 'ending2'; this record has 'sent1', 'sent2', 'ending0', "
                               "'ending1', 'ending3', 'label', 'id'")


def test_a_label_loses_surrounding_spaces_in_csv_and_json_lines(tmp_path):
  """Issue 30 (3): labels are read without the spaces around them in every format, as the classifier's."""
  import json

  csv_label = swag.read_examples(write(tmp_path / "train.csv", [HEADER, ROWS[2][:-1] + " 2 "]), has_labels=True)
  record = {"sent1": "Rain falls.", "sent2": "The", **{f"ending{i}": "e." for i in range(4)}, "label": " 2"}
  json_label = swag.read_examples(write(tmp_path / "train.jsonl", [json.dumps(record)]), has_labels=True)
  assert [e.label for e in csv_label.examples + json_label.examples] == [2, 2]


@pytest.mark.parametrize("lines, line, message", [
    # A row with a field too few (an ending lost).
    ([HEADER, ROWS[0], "5,v,1,s,Rain.,The,gold,a.,b.,c.,0"], 3, "11 comma-separated fields, expected 12 as in the "
     "header; repair or delete that row"),
    # A quote never closed swallows the rest of the file into one field: named as such.
    ([HEADER, '5,v,1,s,"Rain.,The,gold,a.,b.,c.,d.,0', ROWS[2]], 2,
     'a quote (") opened in this row is never closed; close it, or double each quote inside a quoted field'),
    # A quote closed on a later line makes one row of two lines: the field count names where it ran on to.
    ([HEADER, '5,v,1,s,"Rain.,The,gold,a.,b.,c.,d.,0', 'x",1', ROWS[2]], 2,
     "6 comma-separated fields, expected 12 as in the header (the row runs on to line 3: is a quote left "
     "open?)"),
    ([HEADER, ROWS[0], ROWS[2].replace(",2", ",4")], 3, "label '4' is not one of 0-3 (the index of the true "
     "ending)"),
    ([HEADER, ROWS[2][:-1] + "-1"], 2, "label '-1' is not one of 0-3"),
    ([HEADER, ROWS[2][:-1]], 2, "label '' is not one of 0-3"),
    ([HEADER, ROWS[0], ROWS[1], ROWS[2].replace("dog naps.", " ")], 5, "ending1 is empty; every SWAG example "
     "has four endings"),
    ([HEADER.replace("ending3", "ending_3"), ROWS[0]], 1, "the header has no 'ending3' (it reads ',video-id,"),
    ([HEADER[1:], ROWS[0]], 2, "12 comma-separated fields, expected 11 as in the header"),
    ([HEADER.replace(",label", ""), ROWS[0]], 1, "the header has no 'label'"),
    ([], 1, "the file is empty; download the SWAG data again"),
    (["", "  "], 2, "the header has no 'sent1', 'sent2'"),
])
def test_malformed_input_names_file_and_line(tmp_path, lines, line, message):
  path = write(tmp_path / "train.csv", lines)
  with pytest.raises(ValueError) as raised:
    swag.read_examples(path, has_labels=True)
  assert str(raised.value).startswith(f"{path}:{line}: {message}"), str(raised.value)


def test_header_only_and_bad_utf8(tmp_path):
  path = write(tmp_path / "val.csv", [HEADER], end="\n")
  with pytest.raises(ValueError, match=f"^{path}: holds a header but no examples"):
    swag.read_examples(path, has_labels=True)
  with open(path, "wb") as f:
    f.write("\n".join([HEADER, ROWS[0], ROWS[2]]).encode() + b"\n4,v,1,s,Caf\xe9.,It,gold,a,b,c,d,1\n")
  with pytest.raises(ValueError, match=f"^{path}:4: not valid UTF-8 \\(invalid continuation byte at byte 11 of "
                     "the line\\)"):
    swag.read_examples(path, has_labels=True)


def test_encode_example_pairs_context_with_each_ending_and_truncates_each_pair(tmp_path):
  words = ["the", "cat", "sits", ".", "it", "purrs", "barks", "loudly", "flies", "away", "a", "b", "c"]
  tokenizer = tokenization.FullTokenizer({t: i for i, t in enumerate(tokenization.SPECIAL_TOKENS + tuple(words))})
  ids = tokenizer.vocab
  example = swag.SwagExample("0", "The cat sits.", "It", ("purrs.", "barks loudly.", "flies away a b c.", "a"), 1)
  T = 11
  encoded = swag.encode_example(tokenizer, example, T)
  cls, sep = ids["[CLS]"], ids["[SEP]"]
  context = [ids[w] for w in ("the", "cat", "sits", ".")]

  def expect(a, b):
    real = [cls, *a, sep, *b, sep]
    pad = [0] * (T - len(real))
    return real + pad, [1] * len(real) + pad, [0] * (len(a) + 2) + [1] * (len(b) + 1) + pad

  it = ids["it"]
  wanted = [
      expect(context, [it, ids["purrs"], ids["."]]),
      expect(context, [it, ids["barks"], ids["loudly"], ids["."]]),
      # 4 + 7 tokens for a budget of 8: the longer side loses 3 from its end, google-research's truncation.
      expect(context, [it, ids["flies"], ids["away"], ids["a"]]),
      expect(context, [it, ids["a"]]),
  ]
  assert [(e.input_ids, e.input_mask, e.segment_ids) for e in encoded] == wanted
  assert [e.truncated for e in encoded] == [False, False, True, False]
  assert encoded == [encode(tokenizer, a, b, T) for a, b in example.pairs()]


@pytest.mark.skipif(not os.path.exists(REAL_VAL), reason="the sample of the real val.csv is not here")
def test_real_val_sample():
  examples = swag.read_examples(REAL_VAL, has_labels=True).examples
  assert len(examples) == 91 and [e.guid for e in examples[:3]] == ["0", "1", "2"] and examples[-1].guid == "90"
  assert examples[0].sent1 == "Students lower their eyes nervously." and examples[0].sent2 == "She"
  assert examples[0].endings[0] == "pats her shoulder, then saunters toward someone."
  assert collections.Counter(e.label for e in examples) == {2: 30, 3: 22, 0: 20, 1: 19}
