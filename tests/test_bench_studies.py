"""The pure-Python parts of the pretraining-study benchmarks (bench/pretrain_finetune.py, bench_model_size.py,
bench_ablations.py): the corpus split, stage reuse, flags and tables. The benchmarks themselves run the scripts."""

from __future__ import annotations

import json
import os
import sys

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "bench"))

import bench_ablations  # noqa: E402
import bench_model_size  # noqa: E402
import pretrain_finetune as pf  # noqa: E402


def test_squad_split_takes_first_and_last_articles():
  assert pf.squad_split(10, 3, 2) == ([0, 1, 2], [8, 9])
  assert pf.squad_split(5, 0, 0) == ([], [])
  with pytest.raises(ValueError, match="do not fit in 4 articles"):
    pf.squad_split(4, 3, 2)


def test_assemble_documents_leaves_out_reserved_articles_and_holds_out_every_kth():
  embedded = [["e0"], ["e1"], []]  # the empty document is dropped
  articles = [["a0"], ["a1"], ["a2"], ["a3"]]
  train, heldout = pf.assemble_documents(embedded, articles, reserved={0, 3}, heldout_every=2)
  # Kept, in order: e0 e1 a1 a2; indices 0 and 2 are held out.
  assert heldout == [["e0"], ["a1"]]
  assert train == [["e1"], ["a2"]]
  assert pf.assemble_documents(embedded, articles, set(), 0) == ([["e0"], ["e1"], ["a0"], ["a1"], ["a2"], ["a3"]],
                                                                 [])


def test_corpus_text_is_the_pretraining_input_format():
  assert pf.corpus_text([["One.", "Two."], ["Three."]]) == "One.\nTwo.\n\nThree.\n"


def test_article_sentences_splits_each_paragraph():
  article = {"paragraphs": [{"context": "The cat sat. It was Tuesday."}, {"context": "Rain fell."}]}
  assert pf.article_sentences(article) == ["The cat sat.", "It was Tuesday.", "Rain fell."]


def test_stage_runs_once_then_reuses_and_refuses_other_settings(tmp_path):
  calls = []

  def run():
    calls.append(1)
    return {"value": 7}

  said = []
  first = pf.stage(str(tmp_path), {"a": 1}, run, said.append)
  second = pf.stage(str(tmp_path), {"a": 1}, run, said.append)
  assert first == second == {"value": 7, "key": {"a": 1}}
  assert len(calls) == 1 and said == [f"reusing {tmp_path} (finished earlier)"]
  with pytest.raises(SystemExit, match=r"other settings \(a: it had 1, this run has 2\): use another --work_dir"):
    pf.stage(str(tmp_path), {"a": 2}, run, said.append)
  assert len(calls) == 1


def test_key_difference_names_only_what_differs():
  old = {"flags": ["--x=1", "--steps=400", "--seed=1"], "input": "abc"}
  new = {"flags": ["--x=1", "--steps=300", "--seed=1"], "input": "abd"}
  assert pf.key_difference(old, new) == ("flags: it had ['--steps=400'], this run has ['--steps=300']; "
                                         "input: it had 'abc', this run has 'abd'")
  assert pf.key_difference(None, {"a": 1}) == "None != {'a': 1}"


def test_stage_that_fails_leaves_no_done_mark(tmp_path):
  def run():
    raise pf.StageError("boom")

  with pytest.raises(pf.StageError):
    pf.stage(str(tmp_path), {}, run, print)
  assert pf.is_done(str(tmp_path)) is None


def test_check_data_names_the_missing_files(tmp_path):
  (tmp_path / "glue" / "MRPC").mkdir(parents=True)
  (tmp_path / "glue" / "MRPC" / "train.tsv").write_text("x")
  with pytest.raises(SystemExit) as e:
    pf.check_data(str(tmp_path), ("MRPC",), squad=True)
  assert "glue/MRPC/dev.tsv, squad/dev-v1.1.json" in str(e.value)
  with pytest.raises(SystemExit) as e:
    pf.check_data(str(tmp_path), (), squad=False, conll=True)
  assert "lacks conll2003/eng.train, conll2003/eng.testa" in str(e.value)


def test_conll_split_keeps_whole_leading_documents(tmp_path):
  doc = "-DOCSTART- -X- -X- O\n\n"
  train = doc + "EU NNP I-NP I-ORG\nrejects VBZ I-VP O\n\nPeter NNP I-NP I-PER\n\n" + doc + "A DT I-NP O\n\n"
  (tmp_path / "conll2003").mkdir()
  (tmp_path / "conll2003" / "eng.train").write_text(train)
  (tmp_path / "conll2003" / "eng.testa").write_text(doc + "B NNP I-NP I-LOC\n\n")
  work = tmp_path / "work"
  # 1 sentence asked: the whole first document (2 sentences) is kept, not cut inside it.
  description = pf.conll_split(str(work), str(tmp_path), 1, 0)
  assert description["eng.train"] == {"documents": 1, "sentences": 2}
  assert description["eng.testa"] == {"documents": 1, "sentences": 1}
  assert (work / "data" / "conll" / "eng.train").read_text() == train[:train.rindex(doc)]
  with pytest.raises(SystemExit, match="only 3 sentences.*--ner_train_sentences"):
    pf.conll_split(str(work), str(tmp_path), 4, 0)


def test_markdown_table_and_percent():
  assert pf.markdown_table(["a", "b"], [[1, "x"]]) == "| a | b |\n|---|---|\n| 1 | x |"
  assert pf.percent(0.6838) == "68.4" and pf.percent(None) == "-"


def test_model_size_smoke_defaults_and_explicit_flags():
  args = bench_model_size.parse_args(["--smoke"])
  assert (args.sizes, args.pretrain_steps, args.finetune_epochs, args.max_train_examples) == (
      ["bert_l2_h64.json", "bert_tiny.json"], 40, 1.0, 400)
  args = bench_model_size.parse_args(["--smoke", "--pretrain_steps=7", "--sizes=bert_mini.json"])
  assert (args.sizes, args.pretrain_steps) == (["bert_mini.json"], 7)
  full = bench_model_size.parse_args([])
  assert (len(full.sizes), full.pretrain_steps, full.max_train_examples) == (5, 2000, 0)
  with pytest.raises(SystemExit):
    bench_model_size.parse_args(["--sizes=bert_nonexistent.json"])


def test_model_size_configs_are_the_named_sizes():
  sizes = [bench_model_size.size_of(os.path.join(pf.REPO, "configs", f))
           for f in bench_model_size.DEFAULT_SIZES.split(",")]
  assert [(s["L"], s["H"], s["A"], s["intermediate"]) for s in sizes] == [
      (2, 64, 1, 256), (2, 128, 2, 512), (4, 128, 2, 512), (2, 256, 4, 1024), (4, 256, 4, 1024)]


def test_encoder_parameters_counts_the_encoders_weights():
  from bert_tf.config import BertConfig
  from bert_tf.model.encoder import BertEncoder

  config = BertConfig.from_preset("tiny", vocab_size=97, hidden_size=24, num_attention_heads=2,
                                  intermediate_size=40, max_position_embeddings=33, num_hidden_layers=3)
  encoder = BertEncoder(config)
  import numpy as np

  ids = np.array([[1, 2]], np.int32)
  encoder({"input_ids": ids, "input_mask": np.ones_like(ids), "segment_ids": np.zeros_like(ids)})
  size = {"L": 3, "H": 24, "A": 2, "intermediate": 40}
  assert bench_model_size.encoder_parameters(size, 97, 33) == sum(
      int(v.shape.num_elements()) for v in encoder.trainable_variables)


def test_model_size_table_layout():
  row = {"L": 2, "H": 128, "A": 2, "encoder_parameters": 1_450_000, "perplexity": 123.456,
         "heldout_mlm_accuracy": 0.2049, "mrpc_accuracy": 0.7, "pretrain_seconds": 61.2}
  assert bench_model_size.table([row]).splitlines()[2] == "| 2 | 128 | 2 | 1.45 | 123.46 | 20.5 | 70.0 | 61 |"


def test_ablation_variants_and_tables():
  args = bench_ablations.parse_args(["--smoke", "--variants=bert,mask_80_0_20"])
  assert args.variants == ["bert", "mask_80_0_20"] and args.squad_train_articles == 1
  assert bench_ablations.parse_args(["--smoke"]).variants == ["bert", "ltr_no_nsp"]
  assert bench_ablations.parse_args([]).variants == list(bench_ablations.VARIANTS)
  with pytest.raises(SystemExit):
    bench_ablations.parse_args(["--variants=bert,rtl"])
  # 80/0/20 in the paper's [MASK] / SAME / RND order: no token kept, a fifth random.
  assert bench_ablations.VARIANTS["mask_80_0_20"][1][1] == ("--mask_token_rate=0.8", "--random_token_rate=0.2")
  assert bench_ablations.VARIANTS["mask_80_20_0"][1][1] == ("--mask_token_rate=0.8", "--random_token_rate=0.0")
  assert bench_ablations.VARIANTS["ltr_no_nsp"][1][1] == ("--dynamic_masking",)
  rows = {"bert": {"MRPC": 0.7, "RTE": 0.5, "squad_f1": 10.0, "squad_em": 5.0, "ner_f1": 61.23,
                   "ner_feature_f1": 40.0, "heldout_perplexity": 151.6},
          "no_nsp": {"MRPC": 0.65, "RTE": 0.55, "squad_f1": None, "squad_em": None, "ner_f1": 60.0},
          "mask_80_0_20": {"MRPC": 0.6, "RTE": 0.52, "squad_f1": 9.0, "squad_em": 4.5, "ner_f1": 58.04,
                           "ner_feature_f1": 39.95, "heldout_perplexity": 200.4}}
  text = bench_ablations.tables(rows, squad=True, ner=True, feature_choice="weighted_sum_all")
  assert ("| Tasks | MRPC dev acc | RTE dev acc | SQuAD F1 | SQuAD EM | NER dev F1 (fine-tune) | NER dev F1 "
          "(feature-based, weighted_sum_all) | held-out MLM ppl |") in text
  assert "| BERT (MLM + NSP), 80/10/10 | 70.0 | 50.0 | 10.0 | 5.0 | 61.2 | 40.0 | 152 |" in text
  assert "| No NSP | 65.0 | 55.0 | - | - | 60.0 | - | - |" in text
  assert "LTR" not in text
  assert "| 80 / 0 / 20 | 60.0 | 52.0 | 9.0 | 4.5 | 58.0 | 40.0 | 200 |" in text
  short = bench_ablations.tables(rows, squad=False, ner=False, feature_choice=None)
  assert "SQuAD" not in short and "NER" not in short
  assert "| No NSP | 65.0 | 55.0 | - |" in short
  assert "feature-based" not in bench_ablations.tables(rows, squad=False, ner=True, feature_choice=None)


def test_data_dir_is_made_absolute_for_the_stage_keys(tmp_path, monkeypatch):
  monkeypatch.chdir(tmp_path)
  for module in (bench_ablations, bench_model_size):
    assert module.parse_args(["--data_dir=../data"]).data_dir == str(tmp_path.parent / "data")


def test_ablation_ner_flags_and_feature_choice():
  args = bench_ablations.parse_args([])
  assert (args.finetune_seeds, args.pretrain_steps, args.ner_train_sentences, args.ner_eval_sentences,
          args.ner_epochs) == ([1, 2, 3], 4000, 3000, 0, 3.0)
  smoke = bench_ablations.parse_args(["--smoke"])
  assert (smoke.finetune_seeds, smoke.ner_train_sentences, smoke.ner_eval_sentences) == ([1], 100, 100)
  assert bench_ablations.ner_feature_choice("auto", 2) == "weighted_sum_all"
  assert bench_ablations.ner_feature_choice("auto", 4) == "concat_last_four"
  assert bench_ablations.ner_feature_choice("last_hidden", 2) == "last_hidden"
  assert bench_ablations.ner_feature_choice("", 4) == ""
  with pytest.raises(SystemExit):
    bench_ablations.parse_args(["--ner_feature_based=concat_all"])
  with pytest.raises(SystemExit):
    bench_ablations.parse_args(["--ner_train_sentences=-1"])
  tuned = pf.ner_flags(args, 2)
  assert "--learning_rate=0.0003" in tuned and "--seed=2" in tuned and "--num_train_epochs=3.0" in tuned
  assert not any(f.startswith("--feature_based") for f in tuned)
  frozen = pf.ner_flags(args, 2, "weighted_sum_all")
  assert "--learning_rate=0.001" in frozen and frozen[-1] == "--feature_based=weighted_sum_all"


def test_pretraining_flags_give_every_variant_the_same_budget():
  args = bench_ablations.parse_args([])
  flags = {name: pf.pretraining_flags(args, "r", "c", extra) for name, (_, _, extra) in
           bench_ablations.VARIANTS.items()}
  common = flags["bert"]
  for name, values in flags.items():
    assert values[:len(common)] == common, name
  assert flags["ltr_no_nsp"][len(common):] == ["--left_to_right"]
  assert "--num_train_steps=4000" in common and "--train_batch_size=32" in common


def test_build_corpus_reserves_squad_articles(tmp_path, monkeypatch):
  squad = {"version": "1.1", "data": [
      {"title": f"T{i}", "paragraphs": [{"context": f"Article {i} begins. It ends.",
                                         "qas": [{"id": f"q{i}", "question": "Which?",
                                                  "answers": [{"text": "Article", "answer_start": 0},
                                                              {"text": "It", "answer_start": 20}]}]}]}
      for i in range(5)]}
  (tmp_path / "squad").mkdir()
  (tmp_path / "squad" / "dev-v1.1.json").write_text(json.dumps(squad))
  from bert_tf.data import corpus
  monkeypatch.setattr(corpus, "default_corpus_documents", lambda: [["Embedded one."], ["Embedded two."]])
  work = tmp_path / "work"
  description = pf.build_corpus(str(work), str(tmp_path), 1, 2, heldout_every=3)
  # Kept: E1 E2 A1 A2 (articles 0 and 3, 4 reserved); held out: indices 0 and 3.
  assert (work / "data" / "corpus.txt").read_text() == "Embedded two.\n\nArticle 1 begins.\nIt ends.\n"
  assert (work / "data" / "heldout.txt").read_text() == "Embedded one.\n\nArticle 2 begins.\nIt ends.\n"
  train = json.loads((work / "data" / "squad_train.json").read_text())
  evaluation = json.loads((work / "data" / "squad_eval.json").read_text())
  assert [a["title"] for a in train["data"]] == ["T0"] and [a["title"] for a in evaluation["data"]] == ["T3", "T4"]
  assert len(train["data"][0]["paragraphs"][0]["qas"][0]["answers"]) == 1  # one answer to train on
  assert len(evaluation["data"][0]["paragraphs"][0]["qas"][0]["answers"]) == 2  # all answers to score
  assert description["squad_eval"]["questions"] == 2 and description["corpus"]["documents"] == 2


def test_run_main_exits_1_on_a_failed_stage_and_130_on_ctrl_c(capsys):
  def failed():
    raise pf.StageError("run_ner.py exited 2")

  def interrupted():
    raise KeyboardInterrupt

  with pytest.raises(SystemExit) as e:
    pf.run_main(failed)
  assert e.value.code == 1 and capsys.readouterr().err == "error: run_ner.py exited 2\n"
  with pytest.raises(SystemExit) as e:
    pf.run_main(interrupted)
  assert e.value.code == 130 and "rerun the same command to go on" in capsys.readouterr().err
  with pytest.raises(SystemExit) as e:
    pf.run_main(lambda: 0)
  assert e.value.code == 0


def test_stop_lets_a_script_end_then_asks_it_once_with_sigterm():
  import subprocess

  quick = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(0.3)"])
  pf._stop(quick, grace=30)  # pylint: disable=protected-access
  assert quick.returncode == 0  # ended on its own: neither terminated nor killed
  # A script still running after the grace gets SIGTERM, which the training scripts take as "save and stop".
  slow = subprocess.Popen([sys.executable, "-c", "import signal, sys, time\n"
                           "signal.signal(signal.SIGTERM, lambda *_: sys.exit(3))\n"
                           "print('ready', flush=True)\ntime.sleep(60)"], stdout=subprocess.PIPE, text=True)
  assert slow.stdout.readline() == "ready\n"
  pf._stop(slow, grace=0.2)  # pylint: disable=protected-access
  assert slow.returncode == 3


def test_run_script_raises_with_the_logs_tail(tmp_path, monkeypatch):
  (tmp_path / "fails.py").write_text("import sys\nprint('bad flag --x')\nsys.exit(2)\n")
  monkeypatch.setattr(pf, "SCRIPTS", str(tmp_path))
  log = tmp_path / "logs" / "fails.log"
  with pytest.raises(pf.StageError, match=r"fails.py exited 2 after \d+ s; see .*fails.log:\nbad flag --x"):
    pf.run_script("fails.py", [], str(log), lambda _: None)
  (tmp_path / "ok.py").write_text("print('fine')\n")
  assert pf.run_script("ok.py", [], str(tmp_path / "ok.log"), lambda _: None) >= 0
  assert (tmp_path / "ok.log").read_text() == "fine\n"


def test_cached_heldout_perplexity_computes_once(tmp_path, monkeypatch):
  calls = []

  def compute(*args):
    calls.append(args)
    return {"perplexity": 483.0, "mlm_accuracy": 0.14}

  monkeypatch.setattr(pf, "heldout_perplexity", compute)
  pretrained = str(tmp_path / "bert")
  (tmp_path / "bert_logs").mkdir()
  first = pf.cached_heldout_perplexity(pretrained, "r.tfrecord", 128, 20)
  second = pf.cached_heldout_perplexity(pretrained, "r.tfrecord", 128, 20)
  assert first == second == {"perplexity": 483.0, "mlm_accuracy": 0.14}
  assert calls == [(pretrained, "r.tfrecord", 128, 20)]
  assert json.loads((tmp_path / "bert_logs" / "heldout_perplexity.json").read_text())["perplexity"] == 483.0


def test_finetune_stage_runs_the_script_once_and_reads_its_results(tmp_path, monkeypatch):
  (tmp_path / "run_ner.py").write_text(
      "import json, os, sys\n"
      "out = [a.split('=', 1)[1] for a in sys.argv if a.startswith('--output_dir=')][0]\n"
      "os.makedirs(out, exist_ok=True)\n"
      "json.dump({'f1': 0.25}, open(os.path.join(out, 'eval_results.json'), 'w'))\n"
      "print('ran')\n")
  monkeypatch.setattr(pf, "SCRIPTS", str(tmp_path))
  out = str(tmp_path / "runs" / "NER_seed1")
  vocab = str(tmp_path / "data" / "vocab.txt")
  first = pf.finetune_ner(out, "pre", vocab, "conll", ["--seed=1"], lambda _: None)
  assert first["eval_results"] == {"f1": 0.25}
  assert (tmp_path / "runs" / "NER_seed1_logs" / "run_ner.log").read_text() == "ran\n"
  assert first["key"]["flags"][-1] == "--seed=1" and "--do_train" in first["key"]["flags"]
  said = []
  assert pf.finetune_ner(out, "pre", vocab, "conll", ["--seed=1"], said.append) == first
  assert said == [f"reusing {out}_logs (finished earlier)"]
