r"""Benchmark: the paper's pretraining ablations (section 5.1, Table 5) and masking procedures (appendix C.2,
Table 8) at this machine's scale, on equal footing.

One model size (--bert_config, default configs/bert_tiny.json), one corpus, one budget (the same steps x batch x
sequence length, learning rate, warmup and seed) for every variant:

  bert          BERT: masked LM + next sentence, masks 80% [MASK] / 10% random / 10% unchanged (today's default)
  no_nsp        No NSP: the same records, run_pretraining.py --no_nsp (masked LM only)
  ltr_no_nsp    LTR & No NSP: unmasked records (create_pretraining_data.py --dynamic_masking), run_pretraining.py
                --left_to_right (causal attention mask, next-token loss at every position, no NSP)
  mask_100_0_0  MLM + NSP, records with --mask_token_rate=1.0 --random_token_rate=0.0
  mask_80_0_20  MLM + NSP, records with --mask_token_rate=0.8 --random_token_rate=0.2
  mask_80_20_0  MLM + NSP, records with --mask_token_rate=0.8 --random_token_rate=0.0 (20% kept unchanged)

(Table 8's rows read [MASK] / SAME / RND as in the paper: 80/0/20 is 80% [MASK], none kept, 20% random.)

then fine-tunes each on MRPC and RTE (scripts/run_classifier.py on ../shared/data/glue), on a SQuAD v1.1 split
(scripts/run_squad.py --do_train --do_eval; the first --squad_train_articles articles of dev-v1.1.json train, the
last --squad_eval_articles evaluate; neither is in the pretraining corpus) and on CoNLL-2003 NER (scripts/run_ner.py
on the first whole documents of eng.train holding --ner_train_sentences sentences, scored on eng.testa), and trains
the paper's feature-based NER tagger on its frozen features (run_ner.py --feature_based; Table 8 has both NER
columns). Each masked-LM encoder's held-out masked-LM perplexity is measured on records of the held-out documents
(80/10/10 masks, the same for every variant; none for the LTR model, whose loss is another task). Prints Table 5
(bert, no_nsp, ltr_no_nsp) and Table 8 (bert = 80/10/10, mask_100_0_0, mask_80_0_20, mask_80_20_0).
The corpus is pretrain_finetune.build_corpus's (the embedded corpus and the other SQuAD dev articles; the same
documents bench_model_size.py pretrains on, its held-out tenth left out here too).

  python bench/bench_ablations.py                  # 6 variants x 4,000 steps, L2/H128; 3 seeds (~80 min)
  python bench/bench_ablations.py --smoke          # 2 variants, 40 steps, 1 epoch on 300 examples (~4 min)
  python bench/bench_ablations.py --variants=bert,no_nsp --no_squad --no_ner

Rerunning with the same --work_dir reuses every finished stage (and refuses a stage finished with other
settings); writes <work_dir>/ablations.json and ablations.md and prints the tables. Exits non-zero, naming what
to fix, when ../shared/data lacks a file or a script failed (its log's tail is printed).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from collections.abc import Sequence

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import pretrain_finetune as pf  # noqa: E402

# name -> (row label, records made with these create_pretraining_data.py flags, extra run_pretraining.py flags).
VARIANTS = {
    "bert": ("BERT (MLM + NSP), 80/10/10", ("masked_80_10_10", ()), ()),
    "no_nsp": ("No NSP", ("masked_80_10_10", ()), ("--no_nsp",)),
    "ltr_no_nsp": ("LTR & No NSP", ("unmasked", ("--dynamic_masking",)), ("--left_to_right",)),
    "mask_100_0_0": ("MLM + NSP, 100/0/0", ("masked_100_0_0", ("--mask_token_rate=1.0", "--random_token_rate=0.0")),
                     ()),
    "mask_80_0_20": ("MLM + NSP, 80/0/20", ("masked_80_0_20", ("--mask_token_rate=0.8", "--random_token_rate=0.2")),
                     ()),
    # The issue names its rows [MASK] / random / unchanged, which reads "80/0/20" as the paper's 80/20/0: both.
    "mask_80_20_0": ("MLM + NSP, 80/20/0", ("masked_80_20_0", ("--mask_token_rate=0.8", "--random_token_rate=0.0")),
                     ()),
}
TABLE5 = ("bert", "no_nsp", "ltr_no_nsp")
TABLE8 = ("bert", "mask_100_0_0", "mask_80_0_20", "mask_80_20_0")
# The paper's column order: [MASK] / SAME (unchanged) / RND (random token).
TABLE8_LABELS = {"bert": "80 / 10 / 10 (BERT)", "mask_100_0_0": "100 / 0 / 0", "mask_80_0_20": "80 / 0 / 20",
                  "mask_80_20_0": "80 / 20 / 0"}


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
  p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                              formatter_class=argparse.RawDescriptionHelpFormatter)
  p.add_argument("--work_dir", default=os.path.join("out", "bench_ablations"))
  p.add_argument("--data_dir", default=pf.DEFAULT_DATA_DIR,
                 help="../shared/data: glue/MRPC, glue/RTE, squad/dev-v1.1.json.")
  p.add_argument("--variants", default=None, help="Comma-separated, from " + ",".join(VARIANTS) + " (default: "
                 "all; smoke: bert,ltr_no_nsp).")
  p.add_argument("--bert_config", default="bert_tiny.json", help="A file of configs/ (vocab_size and "
                 "max_position_embeddings are replaced by the learnt vocabulary's and --max_seq_length).")
  p.add_argument("--smoke", action="store_true", help="A quick look: the bert and ltr_no_nsp variants, 40 steps, "
                 "1 epoch on 300 examples, a 1-article SQuAD split (other flags given explicitly still win).")
  p.add_argument("--vocab_size", type=int, default=8000)
  p.add_argument("--max_seq_length", type=int, default=128)
  p.add_argument("--max_predictions_per_seq", type=int, default=20)
  p.add_argument("--dupe_factor", type=int, default=None, help="Default 3 (smoke: 1).")
  p.add_argument("--heldout_every", type=int, default=10,
                 help="As bench_model_size.py: every k-th document is left out, so both pretrain on one text.")
  p.add_argument("--pretrain_steps", type=int, default=None, help="Default 4000 (smoke: 40).")
  p.add_argument("--pretrain_batch_size", type=int, default=32)
  p.add_argument("--pretrain_learning_rate", type=float, default=1e-3)
  p.add_argument("--pretrain_warmup_fraction", type=float, default=0.3)
  p.add_argument("--pretrain_seed", type=int, default=12345)
  p.add_argument("--finetune_seeds", default=None, help="Comma-separated fine-tuning seeds, scores averaged "
                 "(default 1,2,3; smoke: 1).")
  p.add_argument("--finetune_epochs", type=float, default=None, help="GLUE epochs. Default 2 (smoke: 1).")
  p.add_argument("--finetune_learning_rate", type=float, default=3e-4,
                 help="Google's miniature BERTs were fine-tuned at 1e-4 to 5e-4.")
  p.add_argument("--finetune_batch_size", type=int, default=32)
  p.add_argument("--max_train_examples", type=int, default=None, help="GLUE; default all (smoke: 300).")
  p.add_argument("--no_squad", action="store_true", help="Skip the SQuAD column.")
  p.add_argument("--squad_train_articles", type=int, default=None, help="Default 4 (1,680 questions; smoke: 1).")
  p.add_argument("--squad_eval_articles", type=int, default=None, help="Default 2 (378 questions; smoke: 1).")
  p.add_argument("--squad_epochs", type=float, default=None, help="Default 1 (smoke: 0.2).")
  p.add_argument("--squad_learning_rate", type=float, default=3e-4)
  p.add_argument("--squad_doc_stride", type=int, default=64)
  p.add_argument("--squad_max_query_length", type=int, default=32)
  p.add_argument("--no_ner", action="store_true", help="Skip both NER columns.")
  p.add_argument("--ner_train_sentences", type=int, default=None,
                 help="The first whole documents of eng.train holding at least this many sentences (default 3000; "
                 "smoke: 100; 0: all 14,041).")
  p.add_argument("--ner_eval_sentences", type=int, default=None,
                 help="Of eng.testa, likewise (default 0: all 3,250; smoke: 100).")
  p.add_argument("--ner_epochs", type=float, default=None, help="Default 3 (smoke: 1).")
  p.add_argument("--ner_learning_rate", type=float, default=3e-4, help="NER fine-tuning.")
  p.add_argument("--ner_feature_based", default="auto",
                 help="The feature choice of the feature-based NER column (feature_choice.CHOICES), '' for none, "
                 "or auto: the paper's concat_last_four with 4 or more layers, else weighted_sum_all.")
  p.add_argument("--ner_feature_learning_rate", type=float, default=1e-3,
                 help="The feature-based tagger's, which trains from scratch.")
  p.add_argument("--threads", type=int, default=0, help="OMP/TF intra-op threads of each script (0: default).")
  args = p.parse_args(argv)
  # Absolute, as the stages record it in their keys: "../shared/data" names other files from another folder.
  args.data_dir = os.path.abspath(args.data_dir)
  defaults = dict(dupe_factor=(1, 3), pretrain_steps=(40, 4000), finetune_epochs=(1.0, 2.0),
                  max_train_examples=(300, 0), squad_train_articles=(1, 4), squad_eval_articles=(1, 2),
                  squad_epochs=(0.2, 1.0), variants=("bert,ltr_no_nsp", ",".join(VARIANTS)),
                  finetune_seeds=("1", "1,2,3"), ner_train_sentences=(100, 3000), ner_eval_sentences=(100, 0),
                  ner_epochs=(1.0, 3.0))
  for name, (small, full) in defaults.items():
    if getattr(args, name) is None:
      setattr(args, name, small if args.smoke else full)
  args.variants = [v for v in args.variants.split(",") if v]
  unknown = sorted(set(args.variants) - set(VARIANTS))
  if unknown or not args.variants:
    p.error(f"--variants: unknown {unknown}; choose from {','.join(VARIANTS)}")
  if not os.path.isfile(os.path.join(pf.REPO, "configs", args.bert_config)):
    p.error(f"--bert_config: no configs/{args.bert_config}")
  args.finetune_seeds = [int(s) for s in args.finetune_seeds.split(",") if s]
  if not args.finetune_seeds or args.pretrain_steps < 1:
    p.error("--finetune_seeds needs a seed and --pretrain_steps must be >= 1")
  if args.ner_train_sentences < 0 or args.ner_eval_sentences < 0:
    p.error("--ner_train_sentences and --ner_eval_sentences must be >= 0 (0: the whole file)")
  if args.ner_feature_based not in ("", "auto"):
    from bert_tf.tasks.common import layer_choice as feature_choice  # pylint: disable=import-outside-toplevel

    try:
      feature_choice.check_choice(args.ner_feature_based, flag="--ner_feature_based")
    except ValueError as e:
      p.error(str(e))
  return args


def ner_feature_choice(flag: str, num_hidden_layers: int) -> str:
  """The feature-based column's choice: the flag's, or for auto the paper's (appendix C.2: the last four layers
  concatenated) where the model has four layers, else the mix of every layer, which a 2-layer model has."""
  if flag != "auto":
    return flag
  return "concat_last_four" if num_hidden_layers >= 4 else "weighted_sum_all"


def squad_flags(args, seed: int) -> list[str]:
  return [f"--max_seq_length={args.max_seq_length}", f"--doc_stride={args.squad_doc_stride}",
          f"--max_query_length={args.squad_max_query_length}", f"--train_batch_size={args.finetune_batch_size}",
          f"--learning_rate={args.squad_learning_rate}", f"--num_train_epochs={args.squad_epochs}",
          f"--seed={seed}", "--predict_batch_size=32"]


def _mean(values: list[float]) -> float | None:
  return statistics.mean(values) if values else None


def tables(rows: dict[str, dict], squad: bool, ner: bool, feature_choice: str | None) -> str:
  """Table 5 and Table 8 (whichever rows were run), markdown: means over the fine-tuning seeds."""
  header = ["MRPC dev acc", "RTE dev acc"] + (["SQuAD F1", "SQuAD EM"] if squad else [])
  if ner:
    header += ["NER dev F1 (fine-tune)"] + ([f"NER dev F1 (feature-based, {feature_choice})"] if feature_choice
                                           else [])
  header.append("held-out MLM ppl")

  def number(value, spec=".1f"):
    return "-" if value is None else format(value, spec)

  def cells(r):
    out = [pf.percent(r.get("MRPC")), pf.percent(r.get("RTE"))]
    if squad:
      out += [number(r.get("squad_f1")), number(r.get("squad_em"))]
    if ner:
      out.append(number(r.get("ner_f1")))
      if feature_choice:
        out.append(number(r.get("ner_feature_f1")))
    out.append(number(r.get("heldout_perplexity"), ".0f"))
    return out

  parts = []
  t5 = [[VARIANTS[n][0]] + cells(rows[n]) for n in TABLE5 if n in rows]
  if t5:
    parts.append("Table 5 (pretraining tasks)\n\n" + pf.markdown_table(["Tasks"] + header, t5))
  t8 = [[TABLE8_LABELS[n]] + cells(rows[n]) for n in TABLE8 if n in rows]
  if t8:
    parts.append("Table 8 (masking procedures)\n\n"
                 + pf.markdown_table(["[MASK] / SAME / RND"] + header, t8))
  return "\n\n".join(parts)


def main(argv: Sequence[str] | None = None) -> int:
  args = parse_args(argv)
  squad, ner = not args.no_squad, not args.no_ner
  pf.check_data(args.data_dir, pf.GLUE_TASKS, squad=True, conll=ner)
  work = os.path.abspath(args.work_dir)
  os.makedirs(work, exist_ok=True)
  started = time.time()

  def say(text: str) -> None:
    print(f"[{time.time() - started:7.1f} s] {text}", flush=True)

  corpus = pf.build_corpus(work, args.data_dir, args.squad_train_articles, args.squad_eval_articles,
                           args.heldout_every)
  say(f"corpus: {corpus['corpus']['documents']} documents, {corpus['corpus']['words']:,} words"
      + (f"; SQuAD split: train {corpus['squad_train']['questions']} questions "
         f"({corpus['squad_train']['articles']}), eval {corpus['squad_eval']['questions']} "
         f"({corpus['squad_eval']['articles']})" if squad else ""))
  vocab = pf.learn_vocab(work, args.vocab_size, say, args.threads)
  vocab_size = pf.vocab_size_of(vocab)
  config_file = pf.write_bert_config(work, args.bert_config, vocab_size, args.max_seq_length)
  common = [f"--max_seq_length={args.max_seq_length}", f"--max_predictions_per_seq={args.max_predictions_per_seq}",
            f"--dupe_factor={args.dupe_factor}", "--random_seed=12345"]
  heldout = pf.heldout_records(work, args.max_seq_length, args.max_predictions_per_seq, say, args.threads)
  choice = None
  if ner:
    conll = pf.conll_split(work, args.data_dir, args.ner_train_sentences, args.ner_eval_sentences)
    say(f"CoNLL-2003: eng.train {conll['eng.train']}, eng.testa {conll['eng.testa']}")
    with open(config_file, encoding="utf-8") as f:
      choice = ner_feature_choice(args.ner_feature_based, json.load(f)["num_hidden_layers"]) or None

  rows: dict[str, dict] = {}
  for name in args.variants:
    label, (records_name, record_flags), pretrain_extra = VARIANTS[name]
    say(f"== {name}: {label}")
    records = pf.create_records(work, records_name, "corpus", common + list(record_flags), say, args.threads)
    pretrained = os.path.join(work, "pretraining", name)
    pre = pf.pretrain(pretrained, pf.pretraining_flags(args, records, config_file, pretrain_extra), say, args.threads)
    say(f"{name}: pretraining {pre['seconds']:.0f} s; {pre['last_log']}")
    row: dict = {"label": label, "pretrain_seconds": pre["seconds"], "pretrain_last_log": pre["last_log"],
                 "records": records_name, "record_flags": list(record_flags),
                 "pretrain_flags": list(pretrain_extra)}
    if "--left_to_right" not in pretrain_extra:
      ppl = pf.cached_heldout_perplexity(pretrained, heldout, args.max_seq_length, args.max_predictions_per_seq)
      say(f"{name}: held-out masked-LM perplexity {ppl['perplexity']:.2f} (accuracy {ppl['mlm_accuracy']:.4f}, "
          f"{ppl['predictions']} predictions)")
      row.update(heldout_perplexity=ppl["perplexity"], heldout_mlm_accuracy=ppl["mlm_accuracy"])
    for task in pf.GLUE_TASKS:
      scores = []
      for seed in args.finetune_seeds:
        run = pf.finetune_glue(task, os.path.join(work, "finetuning", name, f"{task}_seed{seed}"), pretrained,
                               vocab, args.data_dir, pf.glue_flags(args, seed), say, args.threads)
        scores.append(run["eval_results"]["accuracy"])
        say(f"{name}: {task} dev accuracy {scores[-1]:.4f} (seed {seed})")
      row[task], row[f"{task}_accuracies"] = _mean(scores), scores
    if squad:
      f1s, ems = [], []
      for seed in args.finetune_seeds:
        run = pf.finetune_squad(os.path.join(work, "finetuning", name, f"SQuAD_seed{seed}"), pretrained, vocab,
                                corpus["squad_train"]["file"], corpus["squad_eval"]["file"],
                                squad_flags(args, seed), say, args.threads)
        f1s.append(run["eval_results"]["f1"])
        ems.append(run["eval_results"]["exact_match"])
        say(f"{name}: SQuAD F1 {f1s[-1]:.2f} EM {ems[-1]:.2f} (seed {seed})")
      row.update(squad_f1=_mean(f1s), squad_em=_mean(ems), squad_f1s=f1s, squad_ems=ems)
    if ner:
      for column, feature_based in [("ner_f1", None)] + ([("ner_feature_f1", choice)] if choice else []):
        f1s = []
        for seed in args.finetune_seeds:
          folder = f"NER_{feature_based}_seed{seed}" if feature_based else f"NER_seed{seed}"
          run = pf.finetune_ner(os.path.join(work, "finetuning", name, folder), pretrained, vocab, conll["dir"],
                                pf.ner_flags(args, seed, feature_based), say, args.threads)
          f1s.append(100 * run["eval_results"]["f1"])  # run_ner.py writes a fraction; the tables show percent
          say(f"{name}: NER{' ' + feature_based if feature_based else ''} dev F1 {f1s[-1]:.2f} (seed {seed})")
        row[column], row[column + "s"] = _mean(f1s), f1s
    rows[name] = row

  markdown = tables(rows, squad, ner, choice)
  budget = (f"{args.bert_config} ({vocab_size} tokens); pretraining {args.pretrain_steps} steps x batch "
            f"{args.pretrain_batch_size} x {args.max_seq_length} tokens (lr {args.pretrain_learning_rate}, warmup "
            f"{int(args.pretrain_steps * args.pretrain_warmup_fraction)}, seed {args.pretrain_seed}, records "
            f"dupe_factor {args.dupe_factor}); GLUE: {args.finetune_epochs} epochs, lr "
            f"{args.finetune_learning_rate}, batch {args.finetune_batch_size}, seeds {args.finetune_seeds}"
            + (f", first {args.max_train_examples} training examples" if args.max_train_examples else "")
            + (f"; SQuAD: {args.squad_epochs} epochs, lr {args.squad_learning_rate}, doc_stride "
               f"{args.squad_doc_stride}" if squad else "")
            + (f"; NER: {conll['eng.train']['sentences']} eng.train sentences, {args.ner_epochs} epochs, lr "
               f"{args.ner_learning_rate} (fine-tune) / {args.ner_feature_learning_rate} (feature-based "
               f"{choice}), scored on {conll['eng.testa']['sentences']} eng.testa sentences" if ner else ""))
  report = pf.write_report(work, "ablations", "bench_ablations.py", argv, started,
                           {"budget": budget, "corpus": corpus, "conll": conll if ner else None,
                            "vocab_size": vocab_size, "rows": rows,
                            "tables": markdown}, markdown)
  print(f"\nPretraining ablations at this machine's scale; budget: {budget}; corpus: "
        f"{corpus['corpus']['words']:,} words\n")
  print(markdown)
  print(f"\nwall time {report['wall_seconds']:.0f} s; {os.path.join(work, 'ablations.json')}")
  return 0


if __name__ == "__main__":
  pf.run_main(main)
