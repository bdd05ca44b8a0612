"""GLUE readers on files in each task's exact official format, the real MRPC and RTE files, and submissions."""

from __future__ import annotations

import collections
import os
import re

import pytest

from bert_tf.tasks.classification import glue

REAL_GLUE = "/work/shared/data/glue"
BOM = "\ufeff"


def mnli_row(index, pair_id, genre, s1, s2, labels=()):
  """An MNLI row: 8 id, genre and parse columns, the sentences, then the annotator and gold labels."""
  binary = [f"( {s} )" for s in (s1, s2)]
  parses = [f"(ROOT (S {s}))" for s in (s1, s2)]
  return "\t".join([str(index), pair_id[:-1], pair_id, genre, *binary, *parses, s1, s2, *labels])


MNLI_HEAD = ("index\tpromptID\tpairID\tgenre\tsentence1_binary_parse\tsentence2_binary_parse\tsentence1_parse\t"
             "sentence2_parse\tsentence1\tsentence2")
STSB_HEAD = "index\tgenre\tfilename\tyear\told_index\tsource1\tsource2\tsentence1\tsentence2"
MRPC_STRINGS = "#1 ID\t#2 ID\t#1 String\t#2 String"

# Task -> its folder of the GLUE download: file name -> lines. Odd sizes (3 train rows, 1 dev row, 2 test rows)
# so that an off-by-one in the header handling cannot pass.
FILES = {
    "CoLA": {
        "train.tsv": [  # No header: source, label, original mark, sentence.
            "gj04\t1\t\tOur friends won't buy this analysis, let alone the next one we propose.",
            "gj04\t0\t*\tThey drank the pub.",
            "cj99\t1\t\tThe sailors rode the breeze clear of the rocks.",
        ],
        # A field that opens with a quote: a quoting CSV reader would read on to the next quote.
        "dev.tsv": ['bc01\t0\t*\t"Who do you think that left?" asked Mary.'],
        "test.tsv": ["index\tsentence", "0\tBill whistled past the house.", "1\tThe car honked its way down."],
    },
    "SST-2": {
        "train.tsv": [
            "sentence\tlabel",
            "hide new secretions from the parental units \t0",
            "contains no wit , only labored gags \t0",
            "that loves its characters and communicates something rather beautiful about human nature \t1",
        ],
        "dev.tsv": ["sentence\tlabel", "it 's a charming and often affecting journey . \t1"],
        "test.tsv": ["index\tsentence", "0\tuneasy mishmash of styles and genres .", '1\t" the ring " is scary .'],
    },
    "MRPC": {
        "train.tsv": [
            BOM + "Quality\t" + MRPC_STRINGS,
            "1\t702876\t702977\tAmrozi accused his brother , whom he called \" the witness \" , of deliberately "
            "distorting his evidence .\tReferring to him as only \" the witness \" , Amrozi accused his brother of "
            "deliberately distorting his evidence .",
            "0\t2108705\t2108831\tYucaipa owned Dominick 's before selling the chain to Safeway in 1998 .\t"
            "Yucaipa bought Dominick 's in 1995 for $ 693 million .",
            "1\t1330381\t1330521\tThey had published an advertisement on the Internet .\tOn June 10 , the ship 's "
            "owners had published an advertisement on the Internet .",
        ],
        "dev.tsv": [
            BOM + "Quality\t" + MRPC_STRINGS,
            "1\t1355540\t1355592\tHe said the pie business doesn 't fit .\t\" The pie business does not fit .",
        ],
        "test.tsv": [
            BOM + "index\t" + MRPC_STRINGS,
            "0\t1089874\t1089925\tPCCW 's chief operating officer will join .\tThe officer will join .",
            "1\t3019446\t3019327\tThe world 's two largest makers merged .\tTwo makers merged .",
        ],
    },
    "STS-B": {
        "train.tsv": [
            STSB_HEAD + "\tscore",
            "0\tmain-captions\tMSRvid\t2012test\t0001\tnone\tnone\tA plane is taking off.\t"
            "An air plane is taking off.\t5.000",
            "1\tmain-captions\tMSRvid\t2012test\t0004\tnone\tnone\tA man is playing a large flute.\t"
            "A man is playing a flute.\t3.800",
            "2\tmain-news\theadlines\t2013\t0012\tnone\tnone\tObama signs bill.\tRain in Spain.\t0.000",
        ],
        "dev.tsv": [STSB_HEAD + "\tscore",
                    "0\tmain-captions\tMSRvid\t2012test\t0000\tnone\tnone\tA man with a hat.\tA man.\t2.500"],
        "test.tsv": [STSB_HEAD,
                     "0\tmain-captions\tMSRvid\t2012test\t0024\tnone\tnone\tA girl is styling her hair.\t"
                     "A girl is brushing her hair.",
                     "1\tmain-forums\tanswers-forums\t2015\t0010\tnone\tnone\tIt is.\tIt is not."],
    },
    "QQP": {
        "train.tsv": [
            "id\tqid1\tqid2\tquestion1\tquestion2\tis_duplicate",
            "133273\t213221\t213222\tHow is the life of a math student?\tWhich level is enough for jlpt5?\t0",
            # A question broken by a line break in the source data: 3 fields, skipped and counted.
            "\tWas Muhammad a real historical figure? What is the evidence for his existence?\t0",
            "402555\t536040\t536041\tHow do I\tcontrol my anger?\tHow can I control anger?\t1",  # 7 fields.
            "360472\t364011\t490273\tWhat does \"XD\" mean?\tWhat is the meaning of \"XD\"?\t1",
        ],
        "dev.tsv": ["id\tqid1\tqid2\tquestion1\tquestion2\tis_duplicate",
                    "201359\t303345\t303346\tWhy are African-Americans so beautiful?\tWhy are hispanics so "
                    "beautiful?\t0"],
        "test.tsv": ["id\tquestion1\tquestion2",
                     "0\tWhy are people so obsessed with having a girlfriend?\tHow can a single male have a child?",
                     "1\tWhat are the best books?\t"],  # An empty question is kept.
    },
    "MNLI": {
        "train.tsv": [
            MNLI_HEAD + "\tlabel1\tgold_label",
            mnli_row(0, "31193n", "government", "Conceptually cream skimming has two basic dimensions.",
                     "Product and geography are what make cream skimming work. ", ["neutral", "neutral"]),
            mnli_row(1, "101457e", "telephone", "you know during the season and i guess at at your level uh",
                     "You lose the things to the following level if the people recall.",
                     ["entailment", "entailment"]),
            mnli_row(2, "134793c", "fiction", "Gays and lesbians.", "Heterosexuals.",
                     ["contradiction", "contradiction"]),
        ],
        "dev_matched.tsv": [
            MNLI_HEAD + "\tlabel1\tlabel2\tlabel3\tlabel4\tlabel5\tgold_label",
            mnli_row(0, "63735n", "slate", "The new rights are nice enough", "Everyone really likes the newest "
                     "benefits ", ["neutral", "entailment", "neutral", "neutral", "neutral", "neutral"]),
        ],
        "dev_mismatched.tsv": [
            MNLI_HEAD + "\tlabel1\tlabel2\tlabel3\tlabel4\tlabel5\tgold_label",
            mnli_row(0, "75290c", "letters", "Your contribution helped make it possible.",
                     "Your contributions were of no help.", ["contradiction"] * 6),
        ],
        "test_matched.tsv": [MNLI_HEAD,
                             mnli_row(0, "31493n", "travel", "Hierbas, ans seco.", "Hierbas is a name."),
                             mnli_row(1, "92164e", "government", "The extent of the", "The extent.")],
        "test_mismatched.tsv": [MNLI_HEAD, mnli_row(0, "75290c", "letters", "What we have done.", "Nothing.")],
    },
    "QNLI": {
        "train.tsv": [
            "index\tquestion\tsentence\tlabel",
            "0\tWhen did the third Digimon series begin?\tUnlike the two seasons before it, Digimon Tamers takes a "
            "darker approach.\tnot_entailment",
            "1\tWhich missile batteries often have individual launchers?\tWhen the missile batteries have "
            "individual launchers, they are deployed.\tentailment",
            "2\tWhat two things does Popper argue Tarski's theory involves?\tHe said it \"was a great "
            "relief\".\tnot_entailment",
        ],
        "dev.tsv": ["index\tquestion\tsentence\tlabel",
                    "0\tWhat came into force after the new constitution?\tThe Treaty came into force.\tentailment"],
        "test.tsv": ["index\tquestion\tsentence",
                     "0\tWhat organization is devoted to Jihad?\tThe Brotherhood.",
                     "1\tIn what century?\tIn the 19th century."],
    },
    "RTE": {
        "train.tsv": [
            "index\tsentence1\tsentence2\tlabel",
            "0\tNo Weapons of Mass Destruction Found in Iraq Yet.\tWeapons of Mass Destruction Found in Iraq."
            "\tnot_entailment",
            "1\tA place of sorrow became a place of celebration.\tPope Benedict XVI is the new leader.\tentailment",
            "2\tHerceptin was already approved.\t\tentailment",  # An empty sentence2 is kept.
        ],
        "dev.tsv": ["index\tsentence1\tsentence2\tlabel",
                    "0\tDana Reeve has died.\tChristopher Reeve had an accident.\tnot_entailment"],
        "test.tsv": ["index\tsentence1\tsentence2",
                     "0\tMangla was an old dam.\tMangla is a dam.",
                     "1\tThe \"Nobel\" prize.\tA prize."],
    },
    "WNLI": {
        "train.tsv": [
            "index\tsentence1\tsentence2\tlabel",
            "0\tI stuck a pin through a carrot. When I pulled the pin out, it had a hole.\tThe carrot had a hole.\t1",
            "1\tJohn couldn't see the stage with Billy in front of him because he is so short.\t"
            "John is so short.\t1",
            "2\tThe police arrested all of the gang members.\tThe police were trying to stop the drug trade.\t0",
        ],
        "dev.tsv": ["index\tsentence1\tsentence2\tlabel", "0\tThe drain is clogged with hair.\tThe hair has to be "
                    "cleaned.\t0"],
        "test.tsv": ["index\tsentence1\tsentence2", "0\tMaude and Dora had seen the trains.\tDora had seen it.",
                     "1\tHe knocked.\tHe knocked."],
    },
    "AX": {
        "diagnostic.tsv": ["index\tsentence1\tsentence2",
                           "0\tThe cat sat on the mat.\tThe cat did not sit on the mat.",
                           "1\tThe cat did not sit on the mat.\tThe cat sat on the mat."],
    },
}

FOLDERS = {"AX": "diagnostic"}

# (task, split) -> the examples as (guid, text_a, text_b, label).
EXPECTED = {
    ("CoLA", "train"): [
        ("train-0", "Our friends won't buy this analysis, let alone the next one we propose.", None, "1"),
        ("train-1", "They drank the pub.", None, "0"),
        ("train-2", "The sailors rode the breeze clear of the rocks.", None, "1")],
    ("CoLA", "dev"): [("dev-0", '"Who do you think that left?" asked Mary.', None, "0")],
    ("CoLA", "test"): [("0", "Bill whistled past the house.", None, None),
                       ("1", "The car honked its way down.", None, None)],
    ("SST-2", "train"): [
        ("train-0", "hide new secretions from the parental units ", None, "0"),
        ("train-1", "contains no wit , only labored gags ", None, "0"),
        ("train-2", "that loves its characters and communicates something rather beautiful about human nature ",
         None, "1")],
    ("SST-2", "dev"): [("dev-0", "it 's a charming and often affecting journey . ", None, "1")],
    ("SST-2", "test"): [("0", "uneasy mishmash of styles and genres .", None, None),
                        ("1", '" the ring " is scary .', None, None)],
    ("MRPC", "train"): [
        ("train-0", "Amrozi accused his brother , whom he called \" the witness \" , of deliberately distorting "
         "his evidence .", "Referring to him as only \" the witness \" , Amrozi accused his brother of "
         "deliberately distorting his evidence .", "1"),
        ("train-1", "Yucaipa owned Dominick 's before selling the chain to Safeway in 1998 .",
         "Yucaipa bought Dominick 's in 1995 for $ 693 million .", "0"),
        ("train-2", "They had published an advertisement on the Internet .",
         "On June 10 , the ship 's owners had published an advertisement on the Internet .", "1")],
    ("MRPC", "dev"): [("dev-0", "He said the pie business doesn 't fit .", "\" The pie business does not fit .",
                       "1")],
    ("MRPC", "test"): [
        ("0", "PCCW 's chief operating officer will join .", "The officer will join .", None),
        ("1", "The world 's two largest makers merged .", "Two makers merged .", None)],
    ("STS-B", "train"): [
        ("train-0", "A plane is taking off.", "An air plane is taking off.", 5.0),
        ("train-1", "A man is playing a large flute.", "A man is playing a flute.", 3.8),
        ("train-2", "Obama signs bill.", "Rain in Spain.", 0.0)],
    ("STS-B", "dev"): [("dev-0", "A man with a hat.", "A man.", 2.5)],
    ("STS-B", "test"): [("0", "A girl is styling her hair.", "A girl is brushing her hair.", None),
                        ("1", "It is.", "It is not.", None)],
    ("QQP", "train"): [  # Rows 1 and 2 are malformed: a gap in the guids.
        ("train-0", "How is the life of a math student?", "Which level is enough for jlpt5?", "0"),
        ("train-3", 'What does "XD" mean?', 'What is the meaning of "XD"?', "1")],
    ("QQP", "dev"): [("dev-0", "Why are African-Americans so beautiful?", "Why are hispanics so beautiful?", "0")],
    ("QQP", "test"): [
        ("0", "Why are people so obsessed with having a girlfriend?", "How can a single male have a child?", None),
        ("1", "What are the best books?", "", None)],
    ("MNLI", "train"): [
        ("train-0", "Conceptually cream skimming has two basic dimensions.",
         "Product and geography are what make cream skimming work. ", "neutral"),
        ("train-1", "you know during the season and i guess at at your level uh",
         "You lose the things to the following level if the people recall.", "entailment"),
        ("train-2", "Gays and lesbians.", "Heterosexuals.", "contradiction")],
    ("MNLI", "dev_matched"): [("dev_matched-0", "The new rights are nice enough",
                               "Everyone really likes the newest benefits ", "neutral")],
    ("MNLI", "dev_mismatched"): [("dev_mismatched-0", "Your contribution helped make it possible.",
                                  "Your contributions were of no help.", "contradiction")],
    ("MNLI", "test_matched"): [("0", "Hierbas, ans seco.", "Hierbas is a name.", None),
                               ("1", "The extent of the", "The extent.", None)],
    ("MNLI", "test_mismatched"): [("0", "What we have done.", "Nothing.", None)],
    ("QNLI", "train"): [
        ("train-0", "When did the third Digimon series begin?",
         "Unlike the two seasons before it, Digimon Tamers takes a darker approach.", "not_entailment"),
        ("train-1", "Which missile batteries often have individual launchers?",
         "When the missile batteries have individual launchers, they are deployed.", "entailment"),
        ("train-2", "What two things does Popper argue Tarski's theory involves?",
         'He said it "was a great relief".', "not_entailment")],
    ("QNLI", "dev"): [("dev-0", "What came into force after the new constitution?", "The Treaty came into force.",
                       "entailment")],
    ("QNLI", "test"): [("0", "What organization is devoted to Jihad?", "The Brotherhood.", None),
                       ("1", "In what century?", "In the 19th century.", None)],
    ("RTE", "train"): [
        ("train-0", "No Weapons of Mass Destruction Found in Iraq Yet.", "Weapons of Mass Destruction Found in Iraq.",
         "not_entailment"),
        ("train-1", "A place of sorrow became a place of celebration.", "Pope Benedict XVI is the new leader.",
         "entailment"),
        ("train-2", "Herceptin was already approved.", "", "entailment")],
    ("RTE", "dev"): [("dev-0", "Dana Reeve has died.", "Christopher Reeve had an accident.", "not_entailment")],
    ("RTE", "test"): [("0", "Mangla was an old dam.", "Mangla is a dam.", None),
                      ("1", 'The "Nobel" prize.', "A prize.", None)],
    ("WNLI", "train"): [
        ("train-0", "I stuck a pin through a carrot. When I pulled the pin out, it had a hole.",
         "The carrot had a hole.", "1"),
        ("train-1", "John couldn't see the stage with Billy in front of him because he is so short.",
         "John is so short.", "1"),
        ("train-2", "The police arrested all of the gang members.", "The police were trying to stop the drug trade.",
         "0")],
    ("WNLI", "dev"): [("dev-0", "The drain is clogged with hair.", "The hair has to be cleaned.", "0")],
    ("WNLI", "test"): [("0", "Maude and Dora had seen the trains.", "Dora had seen it.", None),
                       ("1", "He knocked.", "He knocked.", None)],
    ("AX", "test"): [("0", "The cat sat on the mat.", "The cat did not sit on the mat.", None),
                     ("1", "The cat did not sit on the mat.", "The cat sat on the mat.", None)],
}


def write_tsv(path, lines, newline="\n"):
  os.makedirs(os.path.dirname(path), exist_ok=True)
  with open(path, "wb") as f:
    f.write((newline.join(lines) + newline).encode("utf-8"))
  return str(path)


def write_task(root, name, files=None, newline="\n"):
  """Writes the task's fixture files into root/<GLUE folder>/ and returns that folder."""
  folder = os.path.join(str(root), FOLDERS.get(name, name))
  for file_name, lines in (files or FILES[name]).items():
    write_tsv(os.path.join(folder, file_name), lines, newline)
  return folder


def as_tuples(result):
  return [(e.guid, e.text_a, e.text_b, e.label) for e in result.examples]


def test_every_task_and_split_has_a_fixture():
  assert {(t.name, s) for t in glue.TASKS.values() for s in t.splits()} == set(EXPECTED)


@pytest.mark.parametrize("name,split", sorted(EXPECTED))
def test_reads_the_official_format(tmp_path, name, split):
  data_dir = write_task(tmp_path, name)
  result = glue.read_examples(name, data_dir, split)
  assert as_tuples(result) == EXPECTED[(name, split)]
  assert result.skipped == (2 if (name, split) == ("QQP", "train") else 0)
  assert result.path == glue.split_path(glue.get_task(name), data_dir, split)


def test_mrpc_byte_order_mark_is_dropped(tmp_path):
  data_dir = write_task(tmp_path, "MRPC")
  with open(os.path.join(data_dir, "train.tsv"), "rb") as f:
    assert f.read(3) == b"\xef\xbb\xbf"  # The fixture really has the BOM, as the download does.
  assert glue.read_examples("MRPC", data_dir, "train").examples[0].label == "1"


def test_windows_line_endings_read_the_same(tmp_path):
  data_dir = write_task(tmp_path, "RTE", newline="\r\n")
  assert as_tuples(glue.read_examples("RTE", data_dir, "train")) == EXPECTED[("RTE", "train")]


def test_columns_are_found_by_header_name(tmp_path):
  lines = ["label\tsentence2\tindex\tsentence1", "entailment\tB.\t7\tA."]
  data_dir = write_task(tmp_path, "RTE", {"dev.tsv": lines})
  assert as_tuples(glue.read_examples("rte", data_dir, "dev")) == [("dev-0", "A.", "B.", "entailment")]


def test_mnli_dev_and_test_mean_matched(tmp_path):
  data_dir = write_task(tmp_path, "MNLI")
  mnli = glue.get_task("MNLI")
  assert as_tuples(glue.read_examples(mnli, data_dir, "dev")) == EXPECTED[("MNLI", "dev_matched")]
  assert glue.split_path(mnli, data_dir, "dev") == os.path.join(data_dir, "dev_matched.tsv")
  assert glue.split_path(mnli, data_dir, "test") == os.path.join(data_dir, "test_matched.tsv")


def test_ax_reads_either_file_name(tmp_path):
  data_dir = write_task(tmp_path, "AX", {"AX.tsv": FILES["AX"]["diagnostic.tsv"]})
  result = glue.read_examples("ax", data_dir, "test")
  assert result.path == os.path.join(data_dir, "AX.tsv")
  assert as_tuples(result) == EXPECTED[("AX", "test")]


def test_task_table():
  assert [t.name for t in glue.TASKS.values()] == [
      "CoLA", "SST-2", "MRPC", "STS-B", "QQP", "MNLI", "QNLI", "RTE", "WNLI", "AX"]
  assert list(glue.TASKS) == [t.name.lower() for t in glue.TASKS.values()]
  mnli, stsb, cola = glue.get_task("mnli"), glue.get_task("stsb"), glue.get_task("CoLA")
  assert mnli.labels == ("contradiction", "entailment", "neutral") and mnli.num_labels == 3
  assert glue.get_task("AX").labels == mnli.labels
  assert glue.get_task("rte").labels == glue.get_task("qnli").labels == ("entailment", "not_entailment")
  assert stsb.is_regression and stsb.num_labels == 1 and stsb.metric_names == ("pearson", "spearman")
  assert not cola.is_pair and not glue.get_task("sst2").is_pair and glue.get_task("wnli").is_pair
  assert cola.metric_names == ("matthews_corrcoef",)
  assert glue.get_task("mrpc").metric_names == glue.get_task("qqp").metric_names == ("accuracy", "f1")
  assert mnli.eval_splits() == ("dev_matched", "dev_mismatched")
  assert mnli.test_splits() == ("test_matched", "test_mismatched")
  assert cola.splits() == ("train", "dev", "test") and cola.eval_splits() == ("dev",)
  assert glue.get_task("AX").splits() == ("test",) and glue.get_task("AX").eval_splits() == ()


@pytest.mark.parametrize("alias,name", [
    ("sst2", "SST-2"), ("SST-2", "SST-2"), ("sst_2", "SST-2"), ("stsb", "STS-B"), ("STS-B", "STS-B"),
    ("MNLI", "MNLI"), ("cola", "CoLA"), ("diagnostic", "AX"), ("ax", "AX")])
def test_get_task_aliases(alias, name):
  assert glue.get_task(alias).name == name


def test_submission_names():
  names = {t.name: [t.submission_name(s) for s in t.test_splits()] for t in glue.TASKS.values()}
  assert names == {"CoLA": ["CoLA"], "SST-2": ["SST-2"], "MRPC": ["MRPC"], "STS-B": ["STS-B"], "QQP": ["QQP"],
                   "MNLI": ["MNLI-m", "MNLI-mm"], "QNLI": ["QNLI"], "RTE": ["RTE"], "WNLI": ["WNLI"],
                   "AX": ["AX"]}
  assert glue.get_task("mnli").submission_name("dev_mismatched") == "MNLI-mm"


def test_label_to_id():
  assert glue.label_to_id("mnli", "neutral") == 2
  assert glue.label_to_id("rte", "not_entailment") == 1
  assert glue.label_to_id("cola", "0") == 0
  assert glue.label_to_id("sts-b", "3.8") == 3.8
  with pytest.raises(ValueError, match="'maybe' is not a RTE label; expected one of entailment, not_entailment"):
    glue.label_to_id("rte", "maybe")


# Errors: each names the file, line or flag at fault.


def test_missing_file_names_the_path_and_the_expected_files(tmp_path):
  with pytest.raises(FileNotFoundError) as e:
    glue.read_examples("RTE", str(tmp_path), "train")
  message = str(e.value)
  assert os.path.join(str(tmp_path), "train.tsv") in message
  assert "--data_dir" in message and "glue_data/RTE/" in message and "train.tsv, dev.tsv, test.tsv" in message
  with pytest.raises(FileNotFoundError, match="dev_matched.tsv, dev_mismatched.tsv"):
    glue.read_examples("MNLI", str(tmp_path), "dev")
  with pytest.raises(FileNotFoundError, match="glue_data/diagnostic/.*diagnostic.tsv, AX.tsv"):
    glue.read_examples("AX", str(tmp_path), "test")


def test_unknown_label_names_path_line_and_labels(tmp_path):
  lines = FILES["RTE"]["train.tsv"][:3] + ["2\tA.\tB.\tneutral"]
  path = write_tsv(tmp_path / "RTE" / "train.tsv", lines)
  with pytest.raises(ValueError, match=f"{re.escape(str(path))}:4: label 'neutral' is not a RTE label; expected one of "
                                       "entailment, not_entailment"):
    glue.read_examples("RTE", str(tmp_path / "RTE"), "train")


def test_cola_bad_label_in_headerless_file(tmp_path):
  path = write_tsv(tmp_path / "CoLA" / "train.tsv", FILES["CoLA"]["train.tsv"] + ["gj04\t*\t\tBad."])
  with pytest.raises(ValueError, match=f"{re.escape(str(path))}:4: label '\\*' is not a CoLA label"):
    glue.read_examples("cola", str(tmp_path / "CoLA"), "train")


@pytest.mark.parametrize("score", ["abc", "5.5", "-0.1", "nan", ""])
def test_stsb_score_must_be_in_range(tmp_path, score):
  lines = FILES["STS-B"]["dev.tsv"][:1] + [
      f"0\tmain-captions\tMSRvid\t2012test\t0000\tnone\tnone\tA.\tB.\t{score}"]
  path = write_tsv(tmp_path / "STS-B" / "dev.tsv", lines)
  with pytest.raises(ValueError, match=f"{re.escape(str(path))}:2: score '{score}' is not a number in \\[0, 5\\]"):
    glue.read_examples("STS-B", str(tmp_path / "STS-B"), "dev")


@pytest.mark.parametrize("name,row", [
    ("RTE", "3\tA sentence with a\ttab.\tB.\tentailment"),  # Too many fields.
    ("RTE", "3\tA sentence broken by a line break"),  # Too few.
    ("CoLA", "gj04\t1\tA sentence without the mark column."),
])
def test_malformed_rows_outside_qqp_are_errors(tmp_path, name, row):
  lines = FILES[name]["train.tsv"] + [row]
  path = write_tsv(tmp_path / name / "train.tsv", lines)
  with pytest.raises(ValueError, match=f"{re.escape(str(path))}:{len(lines)}: \\d tab-separated fields, expected [34]"):
    glue.read_examples(name, str(tmp_path / name), "train")


def test_carriage_return_inside_a_field(tmp_path):
  lines = FILES["RTE"]["dev.tsv"] + ["1\tA\rB.\tC.\tentailment"]
  path = write_tsv(tmp_path / "RTE" / "dev.tsv", lines)
  with pytest.raises(ValueError, match=f"{re.escape(str(path))}:3: a line break inside a field"):
    glue.read_examples("RTE", str(tmp_path / "RTE"), "dev")
  # QQP skips (and counts) the same breakage.
  lines = FILES["QQP"]["dev.tsv"] + ["5\t6\t7\tWhy\r?\tHow?\t1"]
  write_tsv(tmp_path / "QQP" / "dev.tsv", lines)
  result = glue.read_examples("QQP", str(tmp_path / "QQP"), "dev")
  assert result.skipped == 1 and as_tuples(result) == EXPECTED[("QQP", "dev")]


def test_header_without_the_tasks_columns(tmp_path):
  data_dir = write_task(tmp_path, "QNLI")  # QNLI's files read as RTE: --data_dir points at the wrong task.
  path = os.path.join(data_dir, "train.tsv")
  with pytest.raises(ValueError, match=f"{re.escape(str(path))}:1: the header has no column 'sentence1', 'sentence2'"):
    glue.read_examples("RTE", data_dir, "train")


def test_invalid_utf8_names_the_line(tmp_path):
  path = tmp_path / "RTE" / "dev.tsv"
  write_tsv(path, FILES["RTE"]["dev.tsv"])
  with open(path, "ab") as f:
    f.write(b"1\tCaf\xe9.\tB.\tentailment\n")
  with pytest.raises(ValueError, match=f"{re.escape(str(path))}:3: not valid UTF-8"):
    glue.read_examples("RTE", str(tmp_path / "RTE"), "dev")


def test_unreadable_file_names_the_path(tmp_path):
  os.makedirs(tmp_path / "RTE" / "dev.tsv")  # Exists, but open() fails (as it would without read permission).
  with pytest.raises(ValueError, match=f"{re.escape(str(tmp_path / 'RTE' / 'dev.tsv'))}: cannot be read "
                     r"\(Is a directory\); check that it is a readable file"):
    glue.read_examples("RTE", str(tmp_path / "RTE"), "dev")


def test_unknown_task_lists_the_choices():
  with pytest.raises(ValueError, match="--task_name='sst5' is not a GLUE task; choose one of CoLA, SST-2, MRPC, "
                                       "STS-B, QQP, MNLI, QNLI, RTE, WNLI, AX"):
    glue.get_task("sst5")


def test_unknown_split_lists_the_splits(tmp_path):
  with pytest.raises(ValueError, match="split 'validation' is not one of RTE's splits: train, dev, test"):
    glue.read_examples("RTE", str(tmp_path), "validation")
  with pytest.raises(ValueError, match="split 'train' is not one of AX's splits: test"):
    glue.split_path(glue.get_task("AX"), str(tmp_path), "train")


# Submissions.


def read_text(path):
  with open(path, encoding="utf-8") as f:
    return f.read()


def test_submission_round_trip_mnli(tmp_path):
  data_dir = write_task(tmp_path / "glue", "MNLI")
  out = str(tmp_path / "out")
  for split, predictions in (("test_matched", [2, 0]), ("test_mismatched", [1])):
    guids = [e.guid for e in glue.read_examples("MNLI", data_dir, split).examples]
    glue.write_submission("MNLI", split, guids, predictions, out)
  assert sorted(os.listdir(out)) == ["MNLI-m.tsv", "MNLI-mm.tsv"]  # No temporary file left behind.
  assert read_text(os.path.join(out, "MNLI-m.tsv")) == "index\tprediction\n0\tneutral\n1\tcontradiction\n"
  assert read_text(os.path.join(out, "MNLI-mm.tsv")) == "index\tprediction\n0\tentailment\n"


def test_submission_binary_and_ax(tmp_path):
  import numpy as np

  path = glue.write_submission(glue.get_task("cola"), "test", ["0", "1", "2"], np.array([1, 0, 1]), str(tmp_path))
  assert path == os.path.join(str(tmp_path), "CoLA.tsv")
  assert read_text(path) == "index\tprediction\n0\t1\n1\t0\n2\t1\n"
  path = glue.write_submission("ax", "test", ["0"], [1], str(tmp_path))
  assert read_text(path) == "index\tprediction\n0\tentailment\n" and path.endswith("AX.tsv")


def test_submission_stsb_is_clipped(tmp_path):
  path = glue.write_submission("sts-b", "test", ["0", "1", "2"], [-0.5, 2.34567, 5.7], str(tmp_path))
  assert os.path.basename(path) == "STS-B.tsv"
  assert read_text(path) == "index\tprediction\n0\t0.000\n1\t2.346\n2\t5.000\n"


def test_submission_rejects_bad_predictions(tmp_path):
  with pytest.raises(ValueError, match="2 guids but 1 predictions"):
    glue.write_submission("rte", "test", ["0", "1"], [0], str(tmp_path))
  with pytest.raises(ValueError, match="prediction 1 for RTE is label id 2, outside 0..1"):
    glue.write_submission("rte", "test", ["0", "1"], [0, 2], str(tmp_path))
  with pytest.raises(ValueError, match="prediction 0 for RTE is 0.7, not a label id"):
    glue.write_submission("rte", "test", ["0"], [0.7], str(tmp_path))
  assert os.listdir(tmp_path) == []


# The real files of the GLUE download, where this machine has them.


@pytest.mark.parametrize("name,split,count,labels", [
    ("MRPC", "train", 3668, {"1": 2474, "0": 1194}),
    ("MRPC", "dev", 408, {"1": 279, "0": 129}),
    ("RTE", "train", 2490, {"entailment": 1249, "not_entailment": 1241}),
    ("RTE", "dev", 277, {"entailment": 146, "not_entailment": 131}),
])
def test_real_glue_files(name, split, count, labels):
  data_dir = os.path.join(REAL_GLUE, name)
  if not os.path.exists(os.path.join(data_dir, f"{split}.tsv")):
    pytest.skip(f"the GLUE {name} download is not at {data_dir}")
  result = glue.read_examples(name, data_dir, split)
  assert len(result.examples) == count and result.skipped == 0
  assert collections.Counter(e.label for e in result.examples) == labels
  assert all(e.text_a and e.text_b for e in result.examples)
  assert [e.guid for e in result.examples[:2]] == [f"{split}-0", f"{split}-1"]
  if (name, split) == ("MRPC", "dev"):  # A sentence that opens with a quote survives intact.
    assert result.examples[0].text_b == '" The foodservice pie business does not fit our long-term growth strategy .'
