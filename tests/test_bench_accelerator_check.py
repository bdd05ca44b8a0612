"""bench/accelerator_check.py (the prepared GPU check), bench/accelerators.py (dense peaks, MFU) and the precision,
XLA and peak flags of bench/bench_pretraining_throughput.py: the FLOPs arithmetic against hand-derived BERT-base
numbers, chip lookup, one JSON line per part even past a deadline, and the whole check as a --dry_run on CPUs."""

from __future__ import annotations

import csv
import json
import os
import sys

import pytest

import training_helpers as th

sys.path.insert(0, os.path.join(th.REPO, "bench"))

import accelerator_check as ac  # noqa: E402
import accelerators  # noqa: E402


def test_training_flops_of_bert_base_match_the_hand_count():
  import bench_pretraining_throughput as bpt

  # BERT-base, one sequence: L=12, H=768, I=3072, V=30,522, T=128, P=20; a multiply-add is 2 FLOPs.
  # Encoder matmuls per token and layer: Q, K, V, attention output 4 x H^2 = 2,359,296 and FFN in and out
  # 2 x H x I = 4,718,592, together 7,077,888 multiply-adds; x 12 layers x 128 tokens x 2 = 21,743,271,936.
  # Attention scores QK^T and context PV: 2 x 12 x 128^2 x 768 = 301,989,888 multiply-adds, x 2 = 603,979,776.
  # Masked-LM head at 20 positions: transform H^2 = 589,824 and decoder H x V = 23,440,896: 20 x 24,030,720 x 2
  # = 961,228,800. Pooler and NSP: H^2 + 2H = 591,360, x 2 = 1,182,720.
  flops = bpt.training_flops(12, 768, 3072, 30522, batch=1, length=128, predictions=20)
  assert flops["encoder_matmuls"] == 21_743_271_936
  assert flops["attention"] == 603_979_776
  assert flops["mlm_head"] == 961_228_800
  assert flops["pooler_nsp"] == 1_182_720
  assert flops["forward"] == 23_309_663_232
  assert flops["training"] == 3 * 23_309_663_232 == 69_928_989_696  # ~6 x 110M params x 128 + attention, head
  # A batch is that many sequences: every term is linear in B.
  assert bpt.training_flops(12, 768, 3072, 30522, 64, 128, 20)["training"] == 64 * 69_928_989_696


def test_chips_are_found_by_the_names_tensorflow_gives_them():
  assert accelerators.chip_from_device_name("NVIDIA H100 80GB HBM3") == "h100_sxm"
  assert accelerators.chip_from_device_name("NVIDIA H100 PCIe") == "h100_pcie"
  assert accelerators.chip_from_device_name("NVIDIA H200") == "h200"
  assert accelerators.chip_from_device_name("NVIDIA A100-SXM4-40GB") == "a100"
  assert accelerators.chip_from_device_name("NVIDIA A100 80GB PCIe") == "a100"
  assert accelerators.chip_from_device_name("NVIDIA L4") == "l4"
  for unknown in ("NVIDIA L40S", "NVIDIA H100 NVL", "NVIDIA H200 NVL", "Tesla T4", ""):
    assert accelerators.chip_from_device_name(unknown) is None, unknown


def test_the_peak_is_that_of_the_precision_the_matmuls_run_in():
  assert accelerators.peak_tflops("h100_sxm", "mixed_bfloat16") == 989.4
  assert accelerators.peak_tflops("h100_sxm", "mixed_float16") == 989.4
  assert accelerators.peak_tflops("h100_sxm", "float32") == 494.7  # TF32, TensorFlow's default
  assert accelerators.peak_tflops("h100_sxm", "float32", tf32_enabled=False) == 66.9
  assert accelerators.peak_tflops("a100", "float32") == 156.0
  assert accelerators.peak_tflops("h100_pcie", "mixed_bfloat16") == 756.0
  assert accelerators.peak_tflops("tpu_v5e", "float32") == 197.0  # TPU float32 matmuls are bfloat16 passes
  assert accelerators.peak_tflops("tpu_v5p", "mixed_bfloat16") == 459.0
  with pytest.raises(ValueError, match="--chip=v100: choose one of h100_sxm"):
    accelerators.peak_tflops("v100", "float32")
  # --peak_tflops wins over --chip, --chip over the detected name; no peak at all says what to pass.
  assert accelerators.resolve_peak("a100", 100.0, "NVIDIA H100 PCIe", "float32") == (100.0, "--peak_tflops")
  assert accelerators.resolve_peak("a100", None, "NVIDIA H100 PCIe", "mixed_float16") == (
      312.0, "--chip=a100 (fp16)")
  assert accelerators.resolve_peak(None, None, "NVIDIA H100 PCIe", "float32") == (
      378.0, "h100_pcie, detected from 'NVIDIA H100 PCIe' (tf32)")
  assert accelerators.resolve_peak(None, None, None, "float32") == (
      None, "unknown chip (no GPU): pass --peak_tflops or --chip")


def test_mfu_is_achieved_flops_over_the_peak():
  # 64 BERT-base sequences a step at 20 ms a step: 223.8 TFLOP/s, 22.6% of 989.4.
  assert accelerators.mfu(64 * 69_928_989_696, 0.020, 989.4) == pytest.approx(64 * 69.928989696e9 / 0.020 / 989.4e12)
  assert round(accelerators.mfu(64 * 69_928_989_696, 0.020, 989.4), 4) == 0.2262
  assert accelerators.mfu(1e12, 1.0, None) is None


def test_the_deadlines_fit_eight_minutes_on_one_h100():
  full = ac.deadlines(ac.parse_args([]))
  assert [name for name, _, _ in full] == ["environment", "throughput_float32", "throughput_bf16", "throughput_fp16",
                                           "two_vs_one", "finetune"]
  assert sum(seconds for _, seconds, _ in full) == 455 <= ac.TOTAL_SECONDS - 20 == 460
  assert all(must for _, _, must in full)
  scaled = ac.deadlines(ac.parse_args(["--deadline_scale=2", "--only=throughput_bf16,finetune"]))
  assert scaled == [("throughput_bf16", 220.0, True), ("finetune", 90.0, True)]


def test_flags_are_refused_with_what_to_change():
  with pytest.raises(SystemExit):
    ac.parse_args(["--only=throughput"])
  with pytest.raises(SystemExit):
    ac.parse_args(["--chip=a100", "--peak_tflops=312"])
  with pytest.raises(SystemExit):
    ac.parse_args(["--jobs=2"])  # parts sharing a GPU would time each other's load
  assert ac.parse_args(["--dry_run", "--jobs=2"]).jobs == 2


def test_a_part_past_its_deadline_is_killed_and_still_gives_its_line_with_what_it_recorded(tmp_path):
  result = tmp_path / "result.json"
  child = (f"import json, time; json.dump({{'measured': 7}}, open({str(result)!r}, 'w')); "
           "print('working', flush=True); time.sleep(60)")
  line = ac.run_part("slow", [sys.executable, "-c", child], 3.0, str(result), str(tmp_path / "slow.log"))
  assert line["part"] == "slow" and line["ok"] is False and line["measured"] == 7
  assert line["error"] == "deadline of 3 s passed; killed" and line["log"] == str(tmp_path / "slow.log")
  assert 3.0 <= line["seconds"] < 10.0 and line["deadline_s"] == 3.0
  assert list(line) == ["part", "ok", "measured", "error", "log", "seconds", "deadline_s"]


def test_a_part_gives_its_own_verdict_and_a_crash_the_log_tail(tmp_path):
  result = tmp_path / "result.json"
  child = f"import json; json.dump({{'ok': True, 'rate': 1.5}}, open({str(result)!r}, 'w'))"
  line = ac.run_part("fine", [sys.executable, "-c", child], 30.0, str(result), str(tmp_path / "fine.log"))
  assert {k: line[k] for k in ("part", "ok", "rate")} == {"part": "fine", "ok": True, "rate": 1.5}
  assert "error" not in line
  crash = "import sys; print('step 1'); print('error: --x: bad', file=sys.stderr); sys.exit(3)"
  line = ac.run_part("crash", [sys.executable, "-c", crash], 30.0, None, str(tmp_path / "crash.log"))
  assert line["ok"] is False and line["error"] == "exited with 3: error: --x: bad"
  # A script part (no result file) is judged by `finish`, which reads its outputs.
  line = ac.run_part("script", [sys.executable, "-c", "pass"], 30.0, None, str(tmp_path / "script.log"),
                     finish=lambda figures: {"ok": False, "accuracy": 0.5})
  assert line["ok"] is False and line["accuracy"] == 0.5


def test_the_finetune_task_is_not_solved_by_its_majority_class(tmp_path):
  task = ac.write_finetune_task(str(tmp_path), n_train=53, n_dev=21)
  assert task["majority_share"] == pytest.approx(13 / 21)  # 8 "cue" (round(0.4 x 21)), 13 "plain"
  vocab = (tmp_path / "vocab.txt").read_text().split()
  assert vocab[:5] == ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
  config = json.loads((tmp_path / "bert_config.json").read_text())
  assert config["vocab_size"] == len(vocab) == 49
  for split, n in (("train", 53), ("dev", 21)):
    with open(task[split]) as f:
      rows = list(csv.DictReader(f))
    assert len(rows) == n and {r["label"] for r in rows} == {"cue", "plain"}
    for r in rows:
      words = r["sentence1"].split()
      assert set(words) <= set(vocab)
      assert any(w in ac.CUE_WORDS for w in words) == (r["label"] == "cue")


def test_the_throughput_bench_takes_dtype_jit_compile_and_a_peak():
  import bench_pretraining_throughput as bpt

  args = bpt.parse_args(["--dtype=mixed_bfloat16", "--jit_compile", "--chip=h100_sxm"])
  assert (args.dtype, args.xla, args.chip) == ("mixed_bfloat16", "on", "h100_sxm")
  assert bpt.given_peak_tflops(args) == (989.4, "--chip=h100_sxm (bf16)")
  assert bpt.parse_args(["--no-jit_compile"]).xla == "off"
  assert bpt.parse_args([]).xla == "both"
  assert bpt.given_peak_tflops(bpt.parse_args(["--peak_tflops=312"])) == (312.0, "--peak_tflops")
  for bad in (["--xla=off", "--jit_compile"], ["--peak_tflops=1", "--chip=a100"], ["--peak_tflops=0"],
              ["--dtype=mixed_float16"]):  # the default peers hold tfm, which cannot take Keras 3 loss scaling
    with pytest.raises(SystemExit):
      bpt.parse_args(bad)
  assert bpt.parse_args(["--dtype=mixed_float16", "--peers=keras_hub"]).dtype == "mixed_float16"


def test_a_mixed_float16_step_scales_the_loss_and_updates_the_weights():
  import numpy as np
  import tensorflow as tf

  import bench_pretraining_throughput as bpt
  from bert_tf.config import BertConfig

  config = BertConfig.from_preset("tiny", vocab_size=37, num_hidden_layers=1, hidden_size=12,
                                  num_attention_heads=2, intermediate_size=13, max_position_embeddings=16)
  forward, variables = bpt.build_ours(config, "mixed_float16")
  optimizer = bpt.make_optimizer("mixed_float16")
  optimizer.build(variables)
  before = [v.numpy().copy() for v in variables]
  batch = {k: tf.constant(v) for k, v in bpt.synthetic_batch(3, 11, 2, 37, seed=5).items()}
  loss = bpt.make_train_step(forward, variables, optimizer, jit_compile=False)(batch)
  assert loss.dtype == tf.float32 and np.isfinite(loss.numpy())
  assert float(optimizer.dynamic_scale.numpy()) == 32768.0  # Keras' initial scale, no overflow in one step
  assert any(not np.array_equal(b, v.numpy()) for b, v in zip(before, variables))
  assert variables[0].dtype == tf.float32  # mixed precision keeps float32 weights


@pytest.mark.slow
def test_without_a_gpu_the_check_says_why_and_starts_nothing_else(tmp_path):
  # Not a dry run, on this CPU-only machine (CUDA_VISIBLE_DEVICES="" in the tests' environment).
  result = th.run_python([os.path.join("bench", "accelerator_check.py"), f"--work_dir={tmp_path}",
                          "--only=environment,two_vs_one", "--deadline_scale=3"], timeout=300)
  assert result.returncode == 1, result.stderr[-3000:]
  lines = [json.loads(line) for line in result.stdout.splitlines()]
  assert [line["part"] for line in lines] == ["environment", "two_vs_one", "summary"]
  environment, skipped, summary = lines
  assert environment["ok"] is False and environment["gpus"] == [] and environment["gpu_unavailable_reason"]
  assert skipped == {"part": "two_vs_one", "ok": False, "skipped": f"no GPU: {environment['gpu_unavailable_reason']}",
                     "seconds": 0.0, "deadline_s": 135.0}  # 3 x 45
  assert summary["ok"] is False and summary["failed"] == ["environment", "two_vs_one"]
  assert summary["budget_s"] == 1440  # 3 x 480
  assert (tmp_path / "accelerator_check.jsonl").read_text().splitlines() == result.stdout.splitlines()


@pytest.mark.slow
def test_the_dry_run_runs_every_part_at_toy_sizes(tmp_path):
  result = th.run_python([os.path.join("bench", "accelerator_check.py"), "--dry_run", "--jobs=2",
                          f"--work_dir={tmp_path}"], timeout=900)
  assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-3000:]
  lines = {line["part"]: line for line in map(json.loads, result.stdout.splitlines())}
  assert sorted(lines) == sorted(["environment", "throughput_float32", "throughput_bf16", "throughput_fp16",
                                  "two_vs_one", "finetune", "summary"])
  assert all(line["ok"] for line in lines.values()), [p for p, line in lines.items() if not line["ok"]]
  environment = lines["environment"]
  assert environment["gpus"] == [] and set(environment["matmul_tflops"]) == {"float32", "bfloat16", "float16"}
  for part, dtype in ac.THROUGHPUT_DTYPES.items():
    line = lines[part]
    assert line["dtype"] == dtype and line["model"] == "L1/H32/A2" and line["batch_size"] == 4
    assert [(c["implementation"], c["xla"]) for c in line["cases"]] == [
        ("ours", False), ("ours", True), ("keras_hub", True), ("keras_hub", False)]
    assert all("error" not in c and c["sequences_per_s"] > 0 for c in line["cases"]), line["cases"]
    assert line["peak_tflops"] is None  # no GPU to name a chip, no --chip: no MFU, said so
    assert "pass --peak_tflops or --chip" in line["peak_source"]
  assert lines["throughput_fp16"]["cases"][0]["loss_scale"] > 1
  replicas = lines["two_vs_one"]
  assert [run["replicas"] for run in replicas["runs"].values()] == [1, 2, 2]
  assert replicas["max_relative_difference"] <= ac.TWO_VS_ONE_TOLERANCE
  finetune = lines["finetune"]
  assert finetune["majority_share"] == 0.6 and finetune["dev_accuracy"] >= finetune["needed"] == 0.7
  assert lines["summary"]["failed"] == [] and lines["summary"]["dry_run"] is True
