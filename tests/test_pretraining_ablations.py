"""The paper's pretraining ablations as options (Tables 5 and 8): a causal (left-to-right) encoder, the LTR
next-token loss, the No-NSP pretrainer, the masking rates of dynamic masking, and short runs of each through
`run_pretraining`, with the resume check of their options."""

import json
import math
import os

import numpy as np
import pytest
import tensorflow as tf

import training_helpers as th
from bert_tf.config import BertConfig
from bert_tf.model.encoder import BertEncoder
from bert_tf.model.pretraining import BertPretrainer, next_token_loss_terms, pretraining_loss, pretraining_loss_terms
from bert_tf.tasks.pretraining import run as pretraining
from bert_tf.tasks.pretraining.config import PretrainingConfig
from bert_tf.training import inputs, run_identity
from test_encoder import randomize, tiny_config, tiny_inputs
from test_pretraining_model import numpy_lm_logits, tiny_features

B, T = 3, 7  # tiny_inputs: row 0 full, row 1 has 4 real tokens, row 2 has 2


# -- The causal encoder -----------------------------------------------------------------------------------------


@pytest.mark.parametrize("training", [False, True])  # True: the unpadded real-row path
def test_a_causal_encoder_does_not_see_later_positions_and_a_bidirectional_one_does(training):
  inputs = tiny_inputs()
  for causal in (True, False):
    encoder = BertEncoder(tiny_config(hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0,
                                      causal_attention=causal))
    randomize(encoder)
    a = encoder(inputs, training=training)
    for i in range(T - 1):
      changed = {k: v.copy() for k, v in inputs.items()}
      changed["input_ids"][0, i + 1:] = (changed["input_ids"][0, i + 1:] + 11) % 99
      changed["segment_ids"][0, i + 1:] = (changed["segment_ids"][0, i + 1:] + 1) % 3
      b = encoder(changed, training=training)
      for x, y in zip([a["embedding_output"], *a["encoder_outputs"]], [b["embedding_output"], *b["encoder_outputs"]]):
        x, y = x.numpy()[0], y.numpy()[0]
        if causal:
          np.testing.assert_allclose(x[:i + 1], y[:i + 1], atol=1e-6)  # positions <= i: unchanged
        assert np.abs(x[i + 1] - y[i + 1]).max() > 1e-3  # the changed token's own row changes
      last_changed = np.abs(a["sequence_output"].numpy()[0, :i + 1] - b["sequence_output"].numpy()[0, :i + 1]).max()
      assert (last_changed < 1e-6) == causal, (causal, i, last_changed)


def test_causal_attention_bias_masks_later_and_padded_keys():
  from bert_tf.model.layers import MASK_ADDER, attention_bias

  mask = tf.constant([[1, 1, 1], [1, 1, 0]])
  bias = attention_bias(mask, causal=True).numpy()
  assert bias.shape == (2, 1, 3, 3)
  later = np.triu(np.ones((3, 3)), 1) * MASK_ADDER
  np.testing.assert_array_equal(bias[0, 0], later)
  np.testing.assert_array_equal(bias[1, 0], later + np.array([0, 0, MASK_ADDER]))
  assert attention_bias(mask).shape == (2, 1, 1, 3)


def test_a_causal_encoder_pools_the_last_real_token():
  encoder = BertEncoder(tiny_config(causal_attention=True))
  randomize(encoder)
  inputs = tiny_inputs()
  out = encoder(inputs)
  last = out["sequence_output"].numpy()[[0, 1, 2], [6, 3, 1]]  # rows of 7, 4 and 2 real tokens
  expected = np.tanh(last @ encoder.pooler.kernel.numpy() + encoder.pooler.bias.numpy())
  np.testing.assert_allclose(out["pooled_output"].numpy(), expected, atol=1e-6)
  # The classifiers' shortcut cannot read that row: it runs the whole encoder, for the same values.
  np.testing.assert_allclose(encoder.pooled_output(inputs).numpy(), out["pooled_output"].numpy(), atol=1e-6)
  train = BertEncoder(tiny_config(causal_attention=True, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0))
  train.set_weights(encoder.get_weights())
  np.testing.assert_allclose(train(inputs, training=True)["pooled_output"].numpy(), out["pooled_output"].numpy(),
                             atol=1e-5)


def test_causal_attention_config_round_trips_and_google_configs_stay_unchanged(tmp_path):
  plain = tiny_config()
  assert "causal_attention" not in plain.to_dict()  # google-research's keys alone
  causal = tiny_config(causal_attention=True)
  assert causal.to_dict()["causal_attention"] is True
  path = str(tmp_path / "bert_config.json")
  causal.to_json_file(path)
  assert BertConfig.from_json_file(path) == causal
  plain.to_json_file(path)
  assert BertConfig.from_json_file(path) == plain and not BertConfig.from_json_file(path).causal_attention
  with pytest.raises(ValueError, match="causal_attention must be true or false"):
    BertConfig.from_dict({**plain.to_dict(), "causal_attention": "yes"})
  encoder = BertEncoder(causal)
  clone = BertEncoder.from_config(encoder.get_config())
  assert clone.config.causal_attention and clone.layer_0.causal


def test_a_classifier_fine_tuned_from_an_ltr_encoder_keeps_the_causal_mask():
  from bert_tf.tasks.classification.classifier import BertClassifier

  config = tiny_config(causal_attention=True, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
  classifier = BertClassifier(config, num_labels=2, dropout=0.0)
  inputs = tiny_inputs()
  inputs["input_mask"][:] = 1
  classifier(inputs)  # builds the variables
  randomize(classifier)
  logits = classifier(inputs).numpy()
  assert all(block.causal for block in classifier.encoder.transformer_layers)
  # Under a causal mask the last token's row, which the classifier reads, sees every token; the tokens before it
  # see none after them: changing the last token changes the logits, and [CLS]'s row stays as it was.
  changed = {k: v.copy() for k, v in inputs.items()}
  changed["input_ids"][:, -1] = (changed["input_ids"][:, -1] + 5) % 99
  assert np.abs(classifier(changed).numpy() - logits).max() > 1e-4
  seq_a = classifier.encoder(inputs)["sequence_output"].numpy()
  seq_b = classifier.encoder(changed)["sequence_output"].numpy()
  np.testing.assert_allclose(seq_a[:, :-1], seq_b[:, :-1], atol=1e-6)
  # The same weights without the causal mask give other logits: the mask is what the config made.
  plain = BertClassifier(tiny_config(hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0), num_labels=2,
                         dropout=0.0)
  plain(inputs)
  plain.set_weights(classifier.get_weights())
  assert np.abs(plain(inputs).numpy() - logits).max() > 1e-4


# -- The pretrainers and their losses ---------------------------------------------------------------------------


def test_no_nsp_pretrainer_has_no_nsp_head_variables_or_loss():
  model = BertPretrainer(tiny_config(), next_sentence=False)
  randomize(model)
  features = tiny_features()
  out = model(features)
  assert set(out) == {"mlm_logits"} and model.nsp_head is None
  assert not [v.path for v in model.weights if "nsp" in v.path]
  assert len(model.weights) == len(BertPretrainer(tiny_config()).weights) - 2  # NSP kernel and bias
  terms = pretraining_loss_terms(features, out)
  assert set(terms) == {"mlm_loss_sum", "mlm_weight_sum", "mlm_correct_sum"}
  del features["next_sentence_labels"]  # not read
  loss = float(pretraining_loss(features, out))
  assert loss == pytest.approx(float(terms["mlm_loss_sum"]) / float(terms["mlm_weight_sum"]), rel=1e-6)
  assert BertPretrainer.from_config(model.get_config()).nsp_head is None


def test_ltr_pretrainer_outputs_next_token_logits_from_the_tied_head():
  config = tiny_config(causal_attention=True)
  model = BertPretrainer(config)
  assert model.nsp_head is None and model.input_names == ("input_ids", "input_mask", "segment_ids")
  randomize(model)
  inputs = tiny_inputs()
  out = model(inputs)
  assert set(out) == {"lm_logits"} and out["lm_logits"].shape == (B, T, 99)
  seq = model.encoder(inputs)["sequence_output"].numpy()
  np.testing.assert_allclose(out["lm_logits"].numpy(), numpy_lm_logits(model, seq), atol=1e-4, rtol=1e-5)
  with pytest.raises(ValueError, match="no next-sentence head"):
    BertPretrainer(config, next_sentence=True)


def test_ltr_loss_equals_a_hand_computed_next_token_cross_entropy():
  # Two rows of T = 4, vocabulary 3; row 1 has 3 real tokens. Position t predicts input_ids[t + 1].
  ln2, ln3 = math.log(2), math.log(3)
  features = {"input_ids": np.array([[0, 1, 2, 1], [2, 0, 1, 0]], np.int32),
              "input_mask": np.array([[1, 1, 1, 1], [1, 1, 1, 0]], np.int32)}
  logits = np.zeros((2, 4, 3), np.float32)  # uniform: cross-entropy ln 3 ...
  logits[0, 0] = [0, ln2, 0]  # ... here label 1 has p 2/4: ln 2
  logits[0, 2] = [0, 5.0, 0]  # label 1, argmax right
  logits[1, 1] = [0, 0, 7.0]  # label 1, argmax wrong
  logits[1, 2] = [9.0, 9.0, 9.0]  # predicts padding: weight 0
  logits[0, 3] = [1e4, 0, 0]  # the last position predicts nothing
  terms = {k: float(v) for k, v in next_token_loss_terms(features, logits).items()}
  p = 5.0 - math.log(math.exp(5.0) + 2)  # log-probability of label 1 at [0, 2]
  expected_sum = ln2 + ln3 + (-p) + ln3 + (math.log(math.exp(7.0) + 2))
  assert terms["lm_weight_sum"] == 5.0  # 3 predictions in row 0, 2 in row 1
  assert terms["lm_loss_sum"] == pytest.approx(expected_sum, abs=1e-5)
  # Right: [0, 0] (argmax 1), [0, 2], and [1, 0] (label 0, where a tie's argmax lands); wrong: [0, 1], [1, 1].
  assert terms["lm_correct_sum"] == 3.0
  loss = float(pretraining_loss(features, {"lm_logits": logits}))
  assert loss == pytest.approx(expected_sum / 5.0, abs=1e-6)


# -- Dynamic masking rates --------------------------------------------------------------------------------------


def _masking(**rates):
  return inputs.MaskingConfig(vocab_size=99, mask_id=4, special_ids=(2, 3, 0), masked_lm_prob=0.5, **rates)


@pytest.mark.parametrize("rates", [(1.0, 0.0), (0.8, 0.0), (0.8, 0.1)])
def test_dynamic_masking_rates(rates):
  rng = np.random.default_rng(0)
  ids = rng.integers(5, 99, (64, 40)).astype(np.int32)
  ids[:, 0], ids[:, -1] = 2, 3
  mask = np.ones_like(ids)
  out = inputs.mask_tokens(tf.constant(ids), tf.constant(mask), 20, _masking(mask_token_rate=rates[0],
                                                                                 random_token_rate=rates[1]),
                           tf.constant([3, 4]))
  positions, weights = out["masked_lm_positions"].numpy(), out["masked_lm_weights"].numpy() > 0
  new = np.take_along_axis(out["input_ids"].numpy(), positions, 1)[weights]
  old = out["masked_lm_ids"].numpy()[weights]
  masked, kept = new == 4, new == old
  random_ids = ~masked & ~kept
  assert weights.sum() == 64 * 20
  if rates == (1.0, 0.0):
    assert masked.all()
  elif rates == (0.8, 0.0):
    assert not random_ids.any() and 0.75 < masked.mean() < 0.85
  else:
    assert 0.75 < masked.mean() < 0.85 and 0.07 < random_ids.mean() < 0.13  # random ids may equal the old one


@pytest.mark.parametrize("rates, message", [((1.2, 0.0), "--mask_token_rate=1.2: must be in [0, 1]"),
                                            ((0.5, -0.1), "--random_token_rate=-0.1: must be in [0, 1]"),
                                            ((0.8, 0.3), "--mask_token_rate=0.8 + --random_token_rate=0.3 = 1.1 "
                                                         "exceeds 1")])
def test_bad_rates_are_refused_naming_the_flags(rates, message):
  with pytest.raises(ValueError) as error:
    _masking(mask_token_rate=rates[0], random_token_rate=rates[1])
  assert message in str(error.value)
  config = _run_config("unused", "unused", mask_token_rate=rates[0], random_token_rate=rates[1],
                       dynamic_masking=True, vocab_file="v")
  with pytest.raises(ValueError) as error:
    config.validate()
  assert message in str(error.value)


# -- Runs -------------------------------------------------------------------------------------------------------


def _run_config(data, out, **overrides):
  fields = dict(input_file=data, output_dir=str(out), bert_config=th.tiny_bert_config(), max_seq_length=th.T,
                max_predictions_per_seq=th.P, train_batch_size=4, num_train_steps=2, num_warmup_steps=0,
                save_checkpoints_steps=2, steps_per_loop=1, log_steps=1, distribution_strategy="one_device",
                export_encoder=False)
  return PretrainingConfig(**{**fields, **overrides})


def test_option_checks():
  bad = [(dict(left_to_right=True, dynamic_masking=True, vocab_file="v"), "--left_to_right reads unmasked records"),
         (dict(mask_token_rate=1.0, random_token_rate=0.0), "--mask_token_rate / --random_token_rate need "
                                                              "--dynamic_masking"),
         (dict(bert_config=BertConfig.from_dict({**th.tiny_bert_config().to_dict(), "causal_attention": True})),
          "says causal_attention (a left-to-right model): add --left_to_right")]
  for overrides, message in bad:
    with pytest.raises(ValueError, match=None) as error:
      _run_config("unused", "unused", **overrides).validate()
    assert message in str(error.value)
  config = _run_config("unused", "unused", left_to_right=True)
  assert config.model_config().causal_attention and not config.bert_config.causal_attention
  assert not config.next_sentence and config.objective == "left_to_right"


def test_no_nsp_and_ltr_runs_train_and_a_resume_with_other_options_is_refused(tmp_path):
  masked = th.write_records(tmp_path / "masked", num_files=1, per_file=9)
  unmasked = th.write_records(tmp_path / "unmasked", num_files=1, per_file=9, dynamic=True)

  # No NSP: no NSP variables in the checkpoint, the loss is the MLM term alone.
  result = pretraining.run_pretraining(_run_config(masked, tmp_path / "no_nsp", no_nsp=True))
  assert result.step == 2 and set(result.metrics) >= {"mlm_loss", "mlm_accuracy"}
  assert not {"nsp_loss", "nsp_accuracy"} & set(result.metrics)
  assert result.history[-1]["loss"] == pytest.approx(result.metrics["mlm_loss"], rel=1e-5)
  latest = tf.train.latest_checkpoint(str(tmp_path / "no_nsp" / "checkpoints"))
  names = [name for name, _ in tf.train.list_variables(latest)]
  assert any(n.startswith("mlm_head/") for n in names) and not any("nsp" in n for n in names)
  settings = run_identity.read(str(tmp_path / "no_nsp"))["settings"]
  assert (settings["no_nsp"], settings["left_to_right"]) == (True, False)

  # Resuming it without --no_nsp (more steps, so it would train) is refused before anything changes.
  with pytest.raises(ValueError) as error:
    pretraining.run_pretraining(_run_config(masked, tmp_path / "no_nsp", num_train_steps=3))
  assert str(error.value) == (f"{tmp_path / 'no_nsp'} holds a run trained with other settings (no_nsp: true -> "
                              "false); give another --output_dir to keep that run, or pass --overwrite_output_dir "
                              "to start over there")
  assert tf.train.latest_checkpoint(str(tmp_path / "no_nsp" / "checkpoints")) == latest
  # A directory from before run records (and before the options file): the checkpoint's missing NSP head tells.
  os.remove(tmp_path / "no_nsp" / run_identity.RECORD_NAME)
  with pytest.raises(ValueError, match="has no next-sentence head"):
    pretraining.run_pretraining(_run_config(masked, tmp_path / "no_nsp", num_train_steps=3))

  # LTR: masked records are refused; unmasked ones train; the hand-off's config is causal.
  with pytest.raises(ValueError, match="records are masked, and --left_to_right predicts every next token"):
    pretraining.run_pretraining(_run_config(masked, tmp_path / "ltr_bad", left_to_right=True))
  ltr = _run_config(unmasked, tmp_path / "ltr", left_to_right=True, export_encoder=True)
  result = pretraining.run_pretraining(ltr)
  assert result.step == 2 and np.isfinite(result.metrics["lm_loss"]) and "mlm_loss" not in result.metrics
  assert result.history[-1]["loss"] == pytest.approx(result.metrics["lm_loss"], rel=1e-5)
  assert BertConfig.from_json_file(str(tmp_path / "ltr" / "bert_config.json")).causal_attention
  from bert_tf.model import checkpoints

  encoder = checkpoints.load_encoder(str(tmp_path / "ltr"))
  assert encoder.config.causal_attention and all(block.causal for block in encoder.transformer_layers)
  with pytest.raises(ValueError, match="other settings .*left_to_right: true -> false; dynamic_masking: false -> true"):
    pretraining.run_pretraining(_run_config(unmasked, tmp_path / "ltr", no_nsp=True, dynamic_masking=True,
                                            vocab_file=th.write_vocab(tmp_path), num_train_steps=3))


def test_dynamic_masking_rates_are_recorded_and_a_resume_with_others_is_refused(tmp_path):
  unmasked = th.write_records(tmp_path / "unmasked", num_files=1, per_file=9, dynamic=True)
  vocab = th.write_vocab(tmp_path)
  config = _run_config(unmasked, tmp_path / "out", dynamic_masking=True, vocab_file=vocab, mask_token_rate=1.0,
                       random_token_rate=0.0, num_train_steps=1, save_checkpoints_steps=1)
  pretraining.run_pretraining(config)
  settings = run_identity.read(str(tmp_path / "out"))["settings"]
  assert (settings["mask_token_rate"], settings["random_token_rate"]) == (1.0, 0.0)
  with pytest.raises(ValueError) as error:
    pretraining.run_pretraining(_run_config(unmasked, tmp_path / "out", dynamic_masking=True, vocab_file=vocab,
                                            num_train_steps=2))
  assert ("holds a run trained with other settings (mask_token_rate: 1.0 -> 0.8; random_token_rate: 0.0 -> 0.1)"
          in str(error.value))
  # A directory from before run records: pretraining_options.json, which runs wrote then, tells.
  os.remove(tmp_path / "out" / run_identity.RECORD_NAME)
  (tmp_path / "out" / pretraining.OPTIONS_NAME).write_text(json.dumps(pretraining.resume_options(config)))
  with pytest.raises(ValueError, match=r"other masking options \(--mask_token_rate=1.0 there, 0.8 here, "):
    pretraining.run_pretraining(_run_config(unmasked, tmp_path / "out", dynamic_masking=True, vocab_file=vocab,
                                            num_train_steps=2))


def test_the_scripts_flags_reach_the_checks(tmp_path):
  data = th.write_records(tmp_path / "data", num_files=1, per_file=2, dynamic=True)
  config = str(tmp_path / "bert_config.json")
  th.tiny_bert_config().to_json_file(config)
  flags = [f"--input_file={data}", f"--output_dir={tmp_path / 'out'}", f"--bert_config_file={config}",
           f"--max_seq_length={th.T}", f"--max_predictions_per_seq={th.P}", "--dynamic_masking",
           f"--vocab_file={th.write_vocab(tmp_path)}",
           "--mask_token_rate=0.9", "--random_token_rate=0.2", "--no_nsp", "--left_to_right"]
  result = th.run_python([os.path.join(th.REPO, "scripts", "run_pretraining.py"), *flags])
  assert result.returncode == 1
  assert "error: --mask_token_rate=0.9 + --random_token_rate=0.2 = 1.1 exceeds 1" in result.stderr, result.stderr
  assert not os.path.exists(tmp_path / "out")
