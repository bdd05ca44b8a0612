"""Smoke test: the main job's real entry point, shrunk to a minute."""

import json
import os

from bert_tf import main_job


def test_main_job_runs_every_stage(tmp_path):
  said = []
  config = main_job.MainJobConfig(work_dir=str(tmp_path / "work"), records_dir=str(tmp_path / "records"),
                                  vocab_size=800, dupe_factor=1, num_workers=1, num_shards=2, num_output_files=2,
                                  show_instances=2, pretrain_steps=4, pretrain_batch_size=8, pretrain_warmup_steps=1,
                                  pretrain_log_steps=2, finetune_epochs=0.25, finetune_max_seq_length=24,
                                  finetune_log_steps=3)
  summary = main_job.run(config, say=said.append)
  assert summary["vocab"]["size"] <= 800 and summary["vocab"]["unk_rate"] < 1e-3
  assert summary["records"]["instances"] > 500
  assert sorted(os.listdir(tmp_path / "records")) == [
      "documents", "pretrain-00-of-02.tfrecord", "pretrain-01-of-02.tfrecord", "pretrain.stats.json"]
  assert sorted(os.listdir(tmp_path / "records" / "documents")) == [
      "dev.tfrecord", "dev.tfrecord.json", "train.tfrecord", "train.tfrecord.json"]
  assert json.load(open(tmp_path / "work" / "summary.json"))["records"]["instances"] == summary["records"]["instances"]
  text = "\n".join(said)
  assert text.count("--- instance") == 2 and "[MASK](" in text
  assert "4/6 pretraining the tiny encoder" in text and "mlm_accuracy:" in text
  assert [h["step"] for h in summary["pretraining"]["history"]] == [2, 4]
  pretrained = tmp_path / "work" / "pretraining"
  assert (pretrained / "bert_config.json").exists() and (pretrained / "encoder_savedmodel").is_dir()
  assert any(name.startswith("encoder") for name in os.listdir(pretrained / "encoder_checkpoint"))

  finetuned = summary["finetuning"]
  assert (finetuned["train_examples"], finetuned["dev_examples"]) == (792, 198)
  assert finetuned["steps"] == int(792 / 32 * 0.25) == 6
  assert 0 <= finetuned["dev_accuracy"] <= 1 and "held-out accuracy" in text
  exported = summary["export"]
  assert exported["saved_model"].endswith(os.path.join("export", "documents", "1"))
  assert os.path.exists(os.path.join(exported["saved_model"], "assets.extra", "tf_serving_warmup_requests"))
  (prediction,) = exported["predictions"]
  assert prediction["label"] in ("string-methods", "debugger", "formatstrings", "typesmapping")
  assert len(prediction["probabilities"]) == 4 and abs(sum(prediction["probabilities"]) - 1) < 1e-5
