"""bert_tf.tasks.ner.data: the CoNLL-2003 reader on fixtures in the release's format (IOB1, -DOCSTART-, 4 columns)
and copies' (IOB2, BIOES, 2 columns), scheme detection and conversion, bad input naming file:line, and the
windows: labels on first pieces only, long sentences, document context."""

import json
import os

import pytest

from bert_tf.data.tokenization import FullTokenizer
from bert_tf.tasks.ner import data as ner

# The release's layout and tags (IOB1): B-LOC only where two LOC entities touch (line 19).
ORIGINAL = """-DOCSTART- -X- -X- O

EU NNP B-NP I-ORG
rejects VBZ B-VP O
German JJ B-NP I-MISC
call NN I-NP O
. . O O

Peter NNP B-NP I-PER
Blackburn NNP I-NP I-PER

-DOCSTART- -X- -X- O

BRUSSELS NNP B-NP I-LOC
1996-08-22 CD I-NP O

He PRP B-NP O
visited VBD B-VP O
Paris NNP B-NP I-LOC
London NNP B-NP B-LOC
and CC O O
New NNP B-NP I-LOC
York NNP I-NP I-LOC
. . O O
"""
WORDS = [("EU", "rejects", "German", "call", "."), ("Peter", "Blackburn"), ("BRUSSELS", "1996-08-22"),
         ("He", "visited", "Paris", "London", "and", "New", "York", ".")]
IOB1 = [("I-ORG", "O", "I-MISC", "O", "O"), ("I-PER", "I-PER"), ("I-LOC", "O"),
        ("O", "O", "I-LOC", "B-LOC", "O", "I-LOC", "I-LOC", "O")]
IOB2 = [("B-ORG", "O", "B-MISC", "O", "O"), ("B-PER", "I-PER"), ("B-LOC", "O"),
        ("O", "O", "B-LOC", "B-LOC", "O", "B-LOC", "I-LOC", "O")]
BIOES = [("S-ORG", "O", "S-MISC", "O", "O"), ("B-PER", "E-PER"), ("S-LOC", "O"),
         ("O", "O", "S-LOC", "S-LOC", "O", "B-LOC", "E-LOC", "O")]
TAGS = {"IOB1": IOB1, "IOB2": IOB2, "BIOES": BIOES}


def conll_text(scheme: str, columns: int = 4, docstart: bool = True) -> str:
  """The fixture's sentences with `scheme`'s tags, in `columns` columns (word [POS chunk] tag)."""
  lines = []
  for i, (words, tags) in enumerate(zip(WORDS, TAGS[scheme])):
    if docstart and i in (0, 2):
      lines += ["-DOCSTART- -X- -X- O" if columns == 4 else "-DOCSTART- O", ""]
    lines += [" ".join([w, *(["X", "Y"] if columns == 4 else []), t]) for w, t in zip(words, tags)] + [""]
  return "\n".join(lines)


def write(path, text, mode="w"):
  with open(path, mode) as f:
    f.write(text)
  return str(path)


def test_reads_the_release_format(tmp_path):
  conll = ner.read_conll(write(tmp_path / "eng.train", ORIGINAL))
  assert (conll.scheme, conll.types, conll.num_documents, conll.num_columns) == (
      "IOB1", ("LOC", "MISC", "ORG", "PER"), 2, 4)
  assert [s.words for s in conll.sentences] == WORDS
  assert [s.tags for s in conll.sentences] == IOB1
  assert [s.line for s in conll.sentences] == [3, 9, 14, 17]
  assert [s.document for s in conll.sentences] == [0, 0, 1, 1]
  assert conll.num_words == 17


@pytest.mark.parametrize("scheme", ["IOB2", "BIOES"])
@pytest.mark.parametrize("columns", [2, 4])
def test_detects_copies_schemes_and_columns(tmp_path, scheme, columns):
  conll = ner.read_conll(write(tmp_path / "train.txt", conll_text(scheme, columns, docstart=columns == 4)))
  assert conll.scheme == scheme and conll.num_columns == columns
  assert [s.tags for s in conll.sentences] == TAGS[scheme]
  assert conll.num_documents == (2 if columns == 4 else 1)
  # Given explicitly, it is checked and accepted.
  assert ner.read_conll(str(tmp_path / "train.txt"), scheme).scheme == scheme


def test_windows_ending_lines_and_bom_are_read(tmp_path):
  text = "\ufeff" + ORIGINAL.replace("\n", "\r\n")
  conll = ner.read_conll(write(tmp_path / "eng.testa", text.encode("utf-8"), "wb"))
  assert [s.tags for s in conll.sentences] == IOB1 and [s.line for s in conll.sentences] == [3, 9, 14, 17]


@pytest.mark.parametrize("source", ["IOB1", "IOB2", "BIOES"])
@pytest.mark.parametrize("target", ["IOB1", "IOB2", "BIOES"])
def test_converts_between_schemes(source, target):
  for tags, expected in zip(TAGS[source], TAGS[target]):
    assert ner.convert_tags(tags, target) == list(expected)


def test_converts_broken_predictions_as_conlleval_reads_them():
  assert ner.convert_tags(["O", "I-PER", "B-LOC", "E-LOC", "I-LOC"], "IOB2") == [
      "O", "B-PER", "B-LOC", "I-LOC", "B-LOC"]
  with pytest.raises(ValueError, match="scheme 'IOE'"):
    ner.convert_tags(["O"], "IOE")


def test_labels_of_each_label_scheme():
  assert ner.labels_for(("PER", "LOC"), "IOB2") == ("O", "B-LOC", "I-LOC", "B-PER", "I-PER")
  assert ner.labels_for(("LOC",), "BIOES") == ("O", "B-LOC", "I-LOC", "E-LOC", "S-LOC")
  with pytest.raises(ValueError, match="--label_scheme=IOB1: choose one of IOB2, BIOES"):
    ner.labels_for(("LOC",), "IOB1")


# -- Bad input: one line naming the file and line -----------------------------------------------------------


def _error(tmp_path, text, scheme="auto", name="eng.train"):
  path = write(tmp_path / name, text, "wb" if isinstance(text, bytes) else "w")
  with pytest.raises(ValueError) as info:
    ner.read_conll(path, scheme)
  return str(info.value).replace(path, name)


def test_bad_input_names_the_file_and_line(tmp_path):
  lines = ORIGINAL.split("\n")
  three = list(lines)
  three[5] = "German JJ I-MISC"
  assert _error(tmp_path, "\n".join(three)) == ("eng.train:6: 3 columns, the file's first word line has 4; every "
                                                "line holds the same columns (word ... tag)")
  unknown = list(lines)
  unknown[9] = "Blackburn NNP I-NP PER"
  assert _error(tmp_path, "\n".join(unknown)) == (
      "eng.train:10: unknown tag 'PER': expected O or B-, I-, E-, S- followed by an entity type (e.g. B-PER); line 3 "
      "has the entity tag I-ORG: fix the tag, or pass --tag_scheme=plain to learn every tag as a label of its own")
  assert _error(tmp_path, "") == ("eng.train: holds no sentences; expected CoNLL lines 'word POS chunk NER' with a "
                                  "blank line between sentences")
  assert _error(tmp_path, "-DOCSTART- -X- -X- O\n\n\n").startswith("eng.train: holds no sentences")
  latin1 = ORIGINAL.replace("Peter", "P\u00e9ter").encode("latin-1")
  assert _error(tmp_path, latin1) == ("eng.train:9: byte 0xe9 is not UTF-8 (invalid continuation byte); convert "
                                      "the file to UTF-8 (e.g. iconv -f latin1 -t utf-8)")
  assert _error(tmp_path, "EU\n").startswith("eng.train:1: 1 column ('EU')")


def test_detection_goes_by_the_majority_and_names_the_line(tmp_path):
  unclosed = conll_text("BIOES").replace("Blackburn X Y E-PER", "Blackburn X Y O")
  assert _error(tmp_path, unclosed) == (
      "eng.train:9: B-PER is not followed by I-PER or E-PER: not BIOES; fix the tags, or pass --tag_scheme=BIOES "
      "to read them as conlleval does")
  # As the CoNLL-2003 release's eng.train ("the Atlanta Games": B-MISC after O): IOB1 with a stray B- tag is
  # IOB1, the stray tag counted and read as conlleval reads it; an IOB2 file with a stray I- likewise.
  mixed = ORIGINAL.replace("Peter NNP B-NP I-PER", "Peter NNP B-NP B-PER")
  conll = ner.read_conll(write(tmp_path / "eng.train", mixed))
  assert (conll.scheme, conll.irregular) == ("IOB1", 1)
  assert conll.first_irregular == "line 9: B-PER opens an entity after the sentence start"
  stray = conll_text("IOB2").replace("Peter X Y B-PER", "Peter X Y I-PER")
  conll = ner.read_conll(write(tmp_path / "eng.testa", stray))
  assert (conll.scheme, conll.irregular) == ("IOB2", 1)
  assert conll.first_irregular == "line 9: I-PER opens an entity (after the sentence start)"
  with pytest.raises(ValueError, match="--tag_scheme=IOE: choose auto or one of IOB1, IOB2, BIOES, plain"):
    ner.parse_conll(b"a O\n", "x", "IOE")


def test_a_given_scheme_is_trusted_and_its_irregular_tags_counted(tmp_path):
  mixed = ORIGINAL.replace("Peter NNP B-NP I-PER", "Peter NNP B-NP B-PER")
  conll = ner.read_conll(write(tmp_path / "eng.train", mixed), "IOB2")
  # I-ORG, I-MISC, I-LOC (BRUSSELS), I-LOC (Paris) and I-LOC (New) open entities: IOB1's way, read as such.
  assert (conll.scheme, conll.irregular) == ("IOB2", 5)
  assert conll.first_irregular == "line 3: I-ORG opens an entity (after the sentence start)"
  assert [ner.convert_tags(s.tags, "IOB2") for s in conll.sentences] == [list(t) for t in IOB2]
  regular = ner.read_conll(write(tmp_path / "eng.testa", ORIGINAL))
  assert (regular.scheme, regular.irregular, regular.first_irregular) == ("IOB1", 0, "")
  # E-/S- tags cannot be IOB1 or IOB2.
  assert _error(tmp_path, conll_text("BIOES"), "IOB2") == (
      "eng.train:3: S-ORG is a BIOES tag: not IOB2; pass --tag_scheme=BIOES or auto")
  # IOB1 read as BIOES: 6 I- tags open an entity, and 7 entities end without E-.
  assert ner.read_conll(write(tmp_path / "x", conll_text("IOB1")), "BIOES").irregular == 13


def test_missing_file_and_unknown_types(tmp_path):
  with pytest.raises(FileNotFoundError, match="nope.txt: no such CoNLL file"):
    ner.read_conll(str(tmp_path / "nope.txt"))
  conll = ner.read_conll(write(tmp_path / "eng.testb", ORIGINAL))
  ner.check_types(conll, ("LOC", "MISC", "ORG", "PER"), "the model")
  with pytest.raises(ValueError) as info:
    ner.check_types(conll, ("LOC", "PER"), "the model")
  assert str(info.value) == f"{conll.path}:3: unknown tag I-ORG: the model knows the types LOC, PER"


def test_split_files_of_both_layouts(tmp_path):
  os.makedirs(tmp_path / "release")
  for name in ("eng.train", "eng.testa", "eng.testb"):
    write(tmp_path / "release" / name, "")
  assert ner.split_file(str(tmp_path / "release"), "dev") == str(tmp_path / "release" / "eng.testa")
  os.makedirs(tmp_path / "copy")
  for name in ("train.txt", "valid.txt", "test.txt"):
    write(tmp_path / "copy" / name, "")
  assert ner.split_file(str(tmp_path / "copy"), "test") == str(tmp_path / "copy" / "test.txt")
  with pytest.raises(FileNotFoundError, match=r"no dev file \(eng.testa or valid.txt or dev.txt or dev.jsonl or "
                     r"dev.json\)"):
    ner.split_file(str(tmp_path), "dev")
  write(tmp_path / "copy" / "eng.train", "")
  with pytest.raises(ValueError, match="holds eng.train and train.txt for the train split; keep one"):
    ner.split_file(str(tmp_path / "copy"), "train")


def test_json_lines_read_as_the_column_files(tmp_path):
  import json

  lines = [json.dumps({"tokens": list(w), "tags": list(t), "id": i}) for i, (w, t) in enumerate(zip(WORDS, IOB2))]
  path = write(tmp_path / "train.jsonl", "\n".join(lines[:2] + [""] + lines[2:]) + "\n")
  conll = ner.read_conll(path)
  columns = ner.read_conll(write(tmp_path / "train.txt", conll_text("IOB2", 2, docstart=False)))
  assert [(s.words, s.tags) for s in conll.sentences] == [(s.words, s.tags) for s in columns.sentences]
  assert (conll.scheme, conll.types, conll.num_documents) == (columns.scheme, columns.types, 1)
  assert [s.line for s in conll.sentences] == [1, 2, 4, 5]
  os.makedirs(tmp_path / "own")
  write(tmp_path / "own" / "dev.jsonl", "")
  assert ner.split_file(str(tmp_path / "own"), "dev") == str(tmp_path / "own" / "dev.jsonl")
  # Tags without the spaces around them (issue 30, 3), as a column file's are.
  spaced = [json.dumps({"tokens": list(w), "tags": [f" {tag} " for tag in t]}) for w, t in zip(WORDS, IOB2)]
  assert [s.tags for s in ner.read_conll(write(tmp_path / "spaced.jsonl", "\n".join(spaced))).sentences] == [
      s.tags for s in columns.sentences]
  # Errors name the sentence's line; the scheme's and the model's checks too.
  with pytest.raises(ValueError) as info:
    ner.check_types(conll, ("LOC", "PER"), "the model")
  assert str(info.value) == f"{path}:1: unknown tag B-ORG: the model knows the types LOC, PER"
  for text, error in [
      ('{"tokens": ["a"], "tags": ["O"]}\n{"words": ["b"], "tags": ["O"]}\n',
       ":2: column 'tokens': give a list of non-empty strings (it has 'words', 'tags')"),
      ('{"tokens": ["a", "b"], "tags": ["O"]}\n', ":1: 2 tokens and 1 tags; give one tag per token"),
      ('{"tokens": ["a", "b"], "tags": ["B-X", "NOUN"]}\n', ":1: column 'tags': unknown tag 'NOUN': expected O or B-"),
      ('{"tokens": ["a", "b"], "tags": ["S-X", "I-X"]}\n', ":1: I-X is not followed by I-X or E-X: not BIOES"),
      ('{"tokens": ["a"], "tags": ["O"]\n', ":1: not JSON"),
      ("\n", ": holds no sentences"),
  ]:
    with pytest.raises(ValueError) as info:
      ner.read_conll(write(tmp_path / "bad.json", text))
    assert str(info.value).startswith(str(tmp_path / "bad.json") + error), str(info.value)


# -- Plain tag sets --------------------------------------------------------------------------------------------

# The fixture's part-of-speech column: a tag set that is not entities ("." is a tag).
POS = [tuple(line.split(" ")[1] for line in block.split("\n") if line and not line.startswith("-DOCSTART-"))
       for block in ORIGINAL.split("\n\n") if block.strip() and not block.startswith("-DOCSTART-")]


def pos_text(tags=POS, docstart=True) -> str:
  """The fixture's words with `tags` (default: their POS), two columns, -DOCSTART- lines as the release's."""
  lines = []
  for i, (words, row) in enumerate(zip(WORDS, tags)):
    if docstart and i in (0, 2):
      lines += ["-DOCSTART- O", ""]
    lines += [f"{w} {t}" for w, t in zip(words, row)] + [""]
  return "\n".join(lines)


def test_a_plain_tag_set_is_found_and_read_as_it_is(tmp_path):
  assert POS[0] == ("NNP", "VBZ", "JJ", "NN", ".") and len(POS) == 4
  conll = ner.read_conll(write(tmp_path / "train.txt", pos_text()))
  assert (conll.scheme, conll.types, conll.irregular, conll.num_documents) == ("plain", (), 0, 2)
  assert [s.tags for s in conll.sentences] == POS
  assert ner.plain_labels([conll]) == (".", "CC", "CD", "JJ", "NN", "NNP", "PRP", "VBD", "VBZ")
  # Given, any tag is plain, entity-like ones too; an O among plain tags is a tag (auto finds plain).
  assert ner.read_conll(write(tmp_path / "x.txt", conll_text("IOB2", 2)), "plain").scheme == "plain"
  assert ner.parse_conll(b"a O\nb NN\n", "x").scheme == "plain"
  # Integer tags sort as numbers, as run_classifier.py's labels.
  numbered = ner.parse_conll(b"a 10\nb 2\nc 1\n", "x")
  assert ner.plain_labels([numbered]) == ("1", "2", "10")
  # JSON lines alike.
  lines = "".join(json.dumps({"tokens": list(w), "tags": list(t)}) + "\n" for w, t in zip(WORDS, POS))
  jsonl = ner.read_conll(write(tmp_path / "train.jsonl", lines))
  assert jsonl.scheme == "plain" and [s.tags for s in jsonl.sentences] == POS


def test_plain_tag_errors_name_the_file_and_line(tmp_path):
  mixed = pos_text().replace("Paris NNP", "Paris B-LOC")
  assert _error(tmp_path, mixed) == (
      "eng.train:3: unknown tag 'NNP': expected O or B-, I-, E-, S- followed by an entity type (e.g. B-PER); line 19 "
      "has the entity tag B-LOC: fix the tag, or pass --tag_scheme=plain to learn every tag as a label of its own")
  assert _error(tmp_path, pos_text(), "IOB2") == (
      "eng.train:3: unknown tag 'NNP': expected O or B-, I-, E-, S- followed by an entity type (e.g. B-PER); "
      "--tag_scheme=IOB2 reads entity tags: fix the tag, or pass --tag_scheme=plain (or auto)")
  # An empty tag: JSON lines name the record's line; a column file's line loses a column.
  assert _error(tmp_path, '{"tokens": ["a", "b"], "tags": ["NN", ""]}\n', name="train.jsonl") == (
      "train.jsonl:1: column 'tags': give a list of non-empty strings (not a list of words)")
  assert _error(tmp_path, "a NN\nb \n").startswith("eng.train:2: 1 columns, the file's first word line has 2")
  # A dev tag that training never saw.
  train = ner.read_conll(write(tmp_path / "train.txt", pos_text()))
  dev = ner.read_conll(write(tmp_path / "dev.jsonl", '{"tokens": ["a"], "tags": ["NN"]}\n'
                                                    '{"tokens": ["b", "c"], "tags": ["DT", "XX"]}\n'), "plain")
  with pytest.raises(ValueError) as info:
    ner.check_tags(dev, ner.plain_labels([train]), "the training file")
  assert str(info.value) == (f"{dev.path}:2: column 'tags': unknown tag 'DT': the training file has the tags ., CC, "
                             "CD, JJ, NN, NNP, PRP, VBD, VBZ; fix the tag, or train on a file that has it")


def test_plain_labels_sit_on_first_pieces(tmp_path):
  conll = ner.read_conll(write(tmp_path / "train.txt", pos_text()))
  labels = ner.plain_labels([conll])
  ids = {label: i for i, label in enumerate(labels)}
  windows = ner.make_windows(conll.sentences, _tokenizer(), 9, False, ids, ner.PLAIN)
  peter = [w for w in windows if w.sentence == 1][0]  # "Peter Blackburn": peter black ##burn
  assert peter.label_ids[:5] == [0, ids["NNP"], ids["NNP"], 0, 0] and peter.label_mask[:5] == [0, 1, 1, 0, 0]
  first = [w for w in windows if w.sentence == 0][0]
  assert [first.label_ids[p] for p in first.word_positions] == [ids[t] for t in POS[0]]


# -- Windows ---------------------------------------------------------------------------------------------------

VOCAB = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "eu", "rejects", "german", "call", ".", "peter", "black",
         "##burn", "brussels", "1996", "-", "08", "22", "he", "visited", "paris", "london", "and", "new", "york"]


@pytest.fixture()
def sentences(tmp_path):
  return ner.read_conll(write(tmp_path / "eng.train", ORIGINAL)).sentences


def _tokenizer():
  return FullTokenizer(VOCAB, do_lower_case=True)


def _ids(*tokens):
  return [VOCAB.index(t) for t in tokens]


def test_labels_sit_on_first_pieces_only(sentences):
  labels = ner.labels_for(("LOC", "MISC", "ORG", "PER"), "IOB2")
  label_ids = {label: i for i, label in enumerate(labels)}
  windows = ner.make_windows(sentences, _tokenizer(), 13, document_context=False, label_ids=label_ids)
  assert len(windows) == 4 and [w.unique_id for w in windows] == [0, 1, 2, 3]
  w = windows[1]  # Peter Blackburn: black ##burn
  assert w.input_ids == _ids("[CLS]", "peter", "black", "##burn", "[SEP]") + [0] * 8
  assert w.input_mask == [1] * 5 + [0] * 8 and w.segment_ids == [0] * 13
  assert w.label_mask == [0, 1, 1, 0] + [0] * 9
  assert w.label_ids == [0, label_ids["B-PER"], label_ids["I-PER"], 0] + [0] * 9
  assert w.word_positions == [1, 2]
  w = windows[2]  # BRUSSELS 1996-08-22: 1996 - 08 - 22, labelled on "1996" only
  assert w.input_ids[:8] == _ids("[CLS]", "brussels", "1996", "-", "08", "-", "22", "[SEP]")
  assert w.label_mask[:8] == [0, 1, 1, 0, 0, 0, 0, 0]
  assert w.label_ids[:3] == [0, label_ids["B-LOC"], label_ids["O"]]
  # IOB1 tags become the model's IOB2 labels: Paris B-LOC, London B-LOC, New B-LOC, York I-LOC.
  w = windows[3]
  assert [w.label_ids[p] for p in w.word_positions] == [label_ids[t] for t in IOB2[3]]
  # BIOES labels.
  bioes = {label: i for i, label in enumerate(ner.labels_for(("LOC", "MISC", "ORG", "PER"), "BIOES"))}
  w = ner.make_windows(sentences, _tokenizer(), 13, False, bioes, "BIOES")[3]
  assert [w.label_ids[p] for p in w.word_positions] == [bioes[t] for t in BIOES[3]]


def test_long_sentences_are_cut_into_centres_with_their_context(sentences):
  # T = 7: 5 pieces a window. "He visited Paris London and New York ." is 8 pieces: centres of 5 and 3 words.
  windows = ner.make_windows(sentences[3:], _tokenizer(), 7, document_context=False)
  assert [(w.first_word, w.end_word) for w in windows] == [(0, 5), (5, 8)]
  assert windows[0].input_ids == _ids("[CLS]", "he", "visited", "paris", "london", "and", "[SEP]")
  assert windows[0].word_positions == [1, 2, 3, 4, 5]
  # The second centre (new york .) takes 2 words of left context from its own sentence; no right context.
  assert windows[1].input_ids == _ids("[CLS]", "london", "and", "new", "york", ".", "[SEP]")
  assert windows[1].word_positions == [3, 4, 5] and windows[1].label_mask == [0, 0, 0, 1, 1, 1, 0]
  # A word longer than the window keeps its first pieces: "1996-08-22" is 5 pieces; T = 5 keeps 3, which
  # are also the first centre's right context.
  windows = ner.make_windows(sentences[2:3], _tokenizer(), 5, document_context=False)
  assert [w.input_ids for w in windows] == [_ids("[CLS]", "brussels", "1996", "-", "[SEP]"),
                                            _ids("[CLS]", "1996", "-", "08", "[SEP]")]
  assert [w.word_positions for w in windows] == [[1], [1]]


def test_document_context_fills_the_window_from_neighbours(sentences):
  # Document 0: "eu rejects german call ." + "peter black ##burn"; document 1: "brussels 1996 - 08 - 22" + ...
  windows = ner.make_windows(sentences, _tokenizer(), 9, document_context=True)
  assert [(w.sentence, w.first_word, w.end_word) for w in windows] == [(0, 0, 5), (1, 0, 2), (2, 0, 2),
                                                                      (3, 0, 7), (3, 7, 8)]
  # Sentence 1 (3 pieces) has 4 pieces of room: 2 left, 2 right are wanted, but nothing follows it in its
  # document, so the left side takes all 4.
  assert windows[1].input_ids == _ids("[CLS]", "rejects", "german", "call", ".", "peter", "black", "##burn",
                                      "[SEP]")
  assert windows[1].word_positions == [5, 6]
  # Sentence 0 takes the room on the right; it never sees document 1.
  assert windows[0].input_ids == _ids("[CLS]", "eu", "rejects", "german", "call", ".", "peter", "black", "[SEP]")
  # Sentence 2 (6 pieces) gets 1 piece: the left side has none (document start), so the right one.
  assert windows[2].input_ids == _ids("[CLS]", "brussels", "1996", "-", "08", "-", "22", "he", "[SEP]")
  # The last centre (".") gets 3 left, 3 wanted right but none left: 6 on the left.
  assert windows[4].input_ids == _ids("[CLS]", "visited", "paris", "london", "and", "new", "york", ".", "[SEP]")
  assert windows[4].word_positions == [7]
  # Sentence mode sees no neighbour.
  plain = ner.make_windows(sentences, _tokenizer(), 9, document_context=False)
  assert plain[1].input_ids == _ids("[CLS]", "peter", "black", "##burn", "[SEP]") + [0] * 4


def test_predicted_tags_come_from_the_first_pieces(sentences):
  labels = ner.labels_for(("LOC", "MISC", "ORG", "PER"), "IOB2")
  label_ids = {label: i for i, label in enumerate(labels)}
  for context in (False, True):
    windows = ner.make_windows(sentences, _tokenizer(), 7, context, label_ids)
    # The gold labels as predictions, with garbage at every position that is not a first piece.
    predicted = [[w.label_ids[p] if w.label_mask[p] else len(labels) + 1 for p in range(7)] for w in windows]
    assert ner.predicted_tags(windows, predicted, sentences, labels) == [list(t) for t in IOB2]
  with pytest.raises(ValueError, match="sentence 3: words without a window"):
    ner.predicted_tags(windows[:-1], predicted, sentences, labels)


def test_a_word_that_tokenizes_to_nothing_becomes_unk(tmp_path):
  conll = ner.read_conll(write(tmp_path / "x.txt", "eu I-ORG\n\u200b O\n"))
  (window,) = ner.make_windows(conll.sentences, _tokenizer(), 6, document_context=False)
  assert window.input_ids == _ids("[CLS]", "eu", "[UNK]", "[SEP]") + [0, 0] and window.word_positions == [1, 2]
  with pytest.raises(ValueError, match="--max_seq_length=2: must be at least 3"):
    ner.make_windows(conll.sentences, _tokenizer(), 2, document_context=False)
