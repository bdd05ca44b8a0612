"""SQuAD v1.1 and v2.0 extractive question answering, as google-research's run_squad.py does it.

  data.py         the official JSON -> examples -> windowed features
  model.py        `BertSpanLabeler` (start/end logits) and the trainer's task
  postprocess.py  n-best spans, the answer text, v2.0's no-answer threshold
  metrics.py      the official evaluate-v1.1 / v2.0 scores
  folder.py       the fine-tuned model's folder (squad_model/): save, settings, load
  serving.py      the raw-text SavedModel: question and context in, the answer out
  run.py          what scripts/run_squad.py runs
"""
