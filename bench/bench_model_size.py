r"""Benchmark: the paper's model-size study (section 5.2, Table 6) at this machine's scale.

Several (L, H, A) sizes from configs/ are pretrained on one corpus for one budget (the same steps x batch, the
same records, learning rate, warmup and seed), then, per size:

  held-out LM ppl   exp(mean masked-LM cross-entropy) of the final checkpoint's encoder and masked-LM head over
                    every masked position of records made (same masking flags) from documents held out of
                    pretraining (pretrain_finetune.heldout_perplexity);
  MRPC dev acc      scripts/run_classifier.py --do_train --do_eval on ../shared/data/glue/MRPC from that
                    encoder, averaged over --finetune_seeds.

Everything runs through the project's scripts as a user runs them (scripts/learn_vocab.py,
create_pretraining_data.py, run_pretraining.py, run_classifier.py, each a process of its own); the corpus is
pretrain_finetune.build_corpus's (the embedded corpus and the SQuAD v1.1 dev Wikipedia articles, a tenth of the
documents held out; the articles of bench_ablations' SQuAD split are left out here too, so that both benchmarks
pretrain on the very same text).

  python bench/bench_model_size.py                    # 5 sizes, 2,000 steps of 32 x 128 tokens each
  python bench/bench_model_size.py --smoke            # 2 sizes, 40 steps, 1 epoch on 400 MRPC examples (~3 min)

Rerunning with the same --work_dir reuses every finished stage (and refuses a stage finished with other
settings); writes <work_dir>/model_size.json and model_size.md and prints the table. Exits non-zero, naming what
to fix, when ../shared/data lacks MRPC or SQuAD v1.1 dev, or a script failed (its log's tail is printed).
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

DEFAULT_SIZES = "bert_l2_h64.json,bert_tiny.json,bert_l4_h128.json,bert_l2_h256.json,bert_mini.json"


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
  p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                              formatter_class=argparse.RawDescriptionHelpFormatter)
  p.add_argument("--work_dir", default=os.path.join("out", "bench_model_size"))
  p.add_argument("--data_dir", default=pf.DEFAULT_DATA_DIR, help="../shared/data: glue/MRPC, squad/dev-v1.1.json.")
  p.add_argument("--sizes", default=DEFAULT_SIZES, help="Comma-separated files of configs/ (vocab_size and "
                 "max_position_embeddings are replaced by the learnt vocabulary's and --max_seq_length).")
  p.add_argument("--smoke", action="store_true", help="A quick look: the first two sizes, 40 steps, 1 epoch on "
                 "400 MRPC examples (other flags given explicitly still win).")
  p.add_argument("--vocab_size", type=int, default=8000)
  p.add_argument("--max_seq_length", type=int, default=128)
  p.add_argument("--max_predictions_per_seq", type=int, default=20)
  p.add_argument("--dupe_factor", type=int, default=None, help="Default 3 (smoke: 1).")
  p.add_argument("--heldout_every", type=int, default=10, help="Every k-th document is held out of pretraining.")
  p.add_argument("--squad_train_articles", type=int, default=4,
                 help="SQuAD articles reserved for bench_ablations' split: left out of the corpus here too.")
  p.add_argument("--squad_eval_articles", type=int, default=2)
  p.add_argument("--pretrain_steps", type=int, default=None, help="Default 2000 (smoke: 40).")
  p.add_argument("--pretrain_batch_size", type=int, default=32)
  p.add_argument("--pretrain_learning_rate", type=float, default=1e-3)
  p.add_argument("--pretrain_warmup_fraction", type=float, default=0.3,
                 help="Small models at a high rate need a long warmup (see bert_tf/main_job.py).")
  p.add_argument("--pretrain_seed", type=int, default=12345)
  p.add_argument("--finetune_seeds", default="1", help="Comma-separated fine-tuning seeds (accuracy averaged).")
  p.add_argument("--finetune_epochs", type=float, default=None, help="Default 2 (smoke: 1).")
  p.add_argument("--finetune_learning_rate", type=float, default=3e-4,
                 help="Google's miniature BERTs were fine-tuned at 1e-4 to 5e-4.")
  p.add_argument("--finetune_batch_size", type=int, default=32)
  p.add_argument("--max_train_examples", type=int, default=None, help="Default all (smoke: 400).")
  p.add_argument("--threads", type=int, default=0, help="OMP/TF intra-op threads of each script (0: default).")
  args = p.parse_args(argv)
  # Absolute, as the stages record it in their keys: "../shared/data" names other files from another folder.
  args.data_dir = os.path.abspath(args.data_dir)
  smoke = args.smoke
  defaults = dict(dupe_factor=(1, 3), pretrain_steps=(40, 2000), finetune_epochs=(1.0, 2.0),
                  max_train_examples=(400, 0))
  for name, (small, full) in defaults.items():
    if getattr(args, name) is None:
      setattr(args, name, small if smoke else full)
  args.sizes = [s for s in args.sizes.split(",") if s]
  if smoke and args.sizes == DEFAULT_SIZES.split(","):
    args.sizes = args.sizes[:2]
  missing = [s for s in args.sizes if not os.path.isfile(os.path.join(pf.REPO, "configs", s))]
  if missing:
    p.error(f"--sizes: no configs/{', configs/'.join(missing)}")
  args.finetune_seeds = [int(s) for s in args.finetune_seeds.split(",") if s]
  if not args.finetune_seeds or args.pretrain_steps < 1:
    p.error("--finetune_seeds needs a seed and --pretrain_steps must be >= 1")
  return args


def size_of(config_file: str) -> dict:
  with open(config_file, encoding="utf-8") as f:
    c = json.load(f)
  return {"L": c["num_hidden_layers"], "H": c["hidden_size"], "A": c["num_attention_heads"],
          "intermediate": c["intermediate_size"]}


def table(rows: list[dict]) -> str:
  """The paper's Table 6 layout: #L, #H, #A, LM (ppl), MRPC dev accuracy."""
  return pf.markdown_table(
      ["#L", "#H", "#A", "params (M, encoder)", "held-out LM (ppl)", "held-out MLM acc", "MRPC dev acc",
       "pretrain s"],
      [[r["L"], r["H"], r["A"], f"{r['encoder_parameters'] / 1e6:.2f}", f"{r['perplexity']:.2f}",
        pf.percent(r.get("heldout_mlm_accuracy")), pf.percent(r["mrpc_accuracy"]), f"{r['pretrain_seconds']:.0f}"]
       for r in rows])


def encoder_parameters(size: dict, vocab_size: int, positions: int) -> int:
  """Weights of a BERT encoder with the pooler: embeddings + L blocks + pooler."""
  h, i = size["H"], size["intermediate"]
  embeddings = (vocab_size + positions + 2) * h + 2 * h
  block = 4 * (h * h + h) + 2 * h + (h * i + i) + (i * h + h) + 2 * h
  return embeddings + size["L"] * block + h * h + h


def main(argv: Sequence[str] | None = None) -> int:
  args = parse_args(argv)
  pf.check_data(args.data_dir, ("MRPC",), squad=True)
  work = os.path.abspath(args.work_dir)
  os.makedirs(work, exist_ok=True)
  started = time.time()

  def say(text: str) -> None:
    print(f"[{time.time() - started:7.1f} s] {text}", flush=True)

  corpus = pf.build_corpus(work, args.data_dir, args.squad_train_articles, args.squad_eval_articles,
                           args.heldout_every)
  say(f"corpus: {corpus['corpus']['documents']} documents, {corpus['corpus']['words']:,} words; held out: "
      f"{corpus['heldout']['documents']} documents, {corpus['heldout']['words']:,} words")
  vocab = pf.learn_vocab(work, args.vocab_size, say, args.threads)
  vocab_size = pf.vocab_size_of(vocab)
  masking = [f"--max_seq_length={args.max_seq_length}", f"--max_predictions_per_seq={args.max_predictions_per_seq}",
             "--random_seed=12345"]
  records = pf.create_records(work, "bert", "corpus", masking + [f"--dupe_factor={args.dupe_factor}"], say,
                              args.threads)
  heldout = pf.heldout_records(work, args.max_seq_length, args.max_predictions_per_seq, say, args.threads)

  rows = []
  for size_file in args.sizes:
    name = size_file[:-len(".json")]
    config_file = pf.write_bert_config(work, size_file, vocab_size, args.max_seq_length)
    size = size_of(config_file)
    pretrained = os.path.join(work, "pretraining", name)
    say(f"== {name}: L={size['L']} H={size['H']} A={size['A']}")
    pre = pf.pretrain(pretrained, pf.pretraining_flags(args, records, config_file), say, args.threads)
    ppl = pf.cached_heldout_perplexity(pretrained, heldout, args.max_seq_length, args.max_predictions_per_seq)
    say(f"{name}: held-out masked-LM perplexity {ppl['perplexity']:.2f} (loss {ppl['mlm_loss']:.3f}, accuracy "
        f"{ppl['mlm_accuracy']:.3f} over {ppl['predictions']} predictions); pretraining: {pre['last_log']}")
    accuracies = []
    for seed in args.finetune_seeds:
      run = pf.finetune_glue("MRPC", os.path.join(work, "finetuning", name, f"MRPC_seed{seed}"), pretrained, vocab,
                             args.data_dir, pf.glue_flags(args, seed), say, args.threads)
      accuracies.append(run["eval_results"]["accuracy"])
      say(f"{name}: MRPC dev accuracy {run['eval_results']['accuracy']:.4f} (seed {seed})")
    rows.append({"name": name, **size, "encoder_parameters": encoder_parameters(size, vocab_size,
                                                                                 args.max_seq_length),
                 "perplexity": ppl["perplexity"], "heldout_mlm_loss": ppl["mlm_loss"],
                 "heldout_mlm_accuracy": ppl["mlm_accuracy"], "heldout_predictions": ppl["predictions"],
                 "mrpc_accuracy": statistics.mean(accuracies), "mrpc_accuracies": accuracies,
                 "pretrain_seconds": pre["seconds"], "pretrain_last_log": pre["last_log"]})

  markdown = table(rows)
  budget = (f"{args.pretrain_steps} steps x batch {args.pretrain_batch_size} x {args.max_seq_length} tokens "
            f"(lr {args.pretrain_learning_rate}, warmup {int(args.pretrain_steps * args.pretrain_warmup_fraction)}"
            f", seed {args.pretrain_seed}); MRPC: {args.finetune_epochs} epochs, lr {args.finetune_learning_rate},"
            f" batch {args.finetune_batch_size}, seeds {args.finetune_seeds}"
            + (f", first {args.max_train_examples} training examples" if args.max_train_examples else ""))
  report = pf.write_report(work, "model_size", "bench_model_size.py", argv, started,
                           {"budget": budget, "corpus": corpus, "vocab_size": vocab_size, "rows": rows,
                            "table": markdown}, markdown)
  print(f"\nModel size (Table 6 at this machine's scale); budget: {budget}; corpus: "
        f"{corpus['corpus']['words']:,} words, held-out {corpus['heldout']['words']:,} words; vocab {vocab_size}\n")
  print(markdown)
  print(f"\nwall time {report['wall_seconds']:.0f} s; {os.path.join(work, 'model_size.json')}")
  return 0


if __name__ == "__main__":
  pf.run_main(main)
