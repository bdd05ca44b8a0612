"""Smoke test: the main job's real entry point, shrunk to a minute."""

import json
import os

from bert_tf import main_job


def test_main_job_runs_every_stage(tmp_path):
  said = []
  config = main_job.MainJobConfig(work_dir=str(tmp_path / "work"), records_dir=str(tmp_path / "records"),
                                  vocab_size=800, dupe_factor=1, num_workers=1, num_shards=2, num_output_files=2,
                                  show_instances=2, pretrain_steps=4, pretrain_batch_size=8, pretrain_warmup_steps=1,
                                  pretrain_log_steps=2)
  summary = main_job.run(config, say=said.append)
  assert summary["vocab"]["size"] <= 800 and summary["vocab"]["unk_rate"] < 1e-3
  assert summary["records"]["instances"] > 500
  assert sorted(os.listdir(tmp_path / "records")) == [
      "pretrain-00-of-02.tfrecord", "pretrain-01-of-02.tfrecord", "pretrain.stats.json"]
  assert json.load(open(tmp_path / "work" / "summary.json"))["records"]["instances"] == summary["records"]["instances"]
  text = "\n".join(said)
  assert text.count("--- instance") == 2 and "[MASK](" in text
  assert "4/4 pretraining the tiny encoder" in text and "mlm_accuracy:" in text
  assert [h["step"] for h in summary["pretraining"]["history"]] == [2, 4]
  pretrained = tmp_path / "work" / "pretraining"
  assert (pretrained / "bert_config.json").exists() and (pretrained / "encoder_savedmodel").is_dir()
  assert any(name.startswith("encoder") for name in os.listdir(pretrained / "encoder_checkpoint"))
