"""Exporting fine-tuned models for TensorFlow Serving, and the clients that call them.

  serving        the one export path: `export_servable` writes <export_dir>/<model_name>/<version>/ atomically,
                 with warmup requests, a manifest (task, signatures, versions, non-core ops) and the vocabulary
  limits         what one request may hold (characters per field), read by flags and clients too
  requests       client helpers: the REST body and URL, the gRPC PredictRequest, sending them, running locally

A task supplies only its `tf.Module` (serving functions over the model and a `GraphTokenizer`), its warmup
examples and its manifest fields, in its own package: bert_tf/tasks/<task>/serving.py (the classifier's raw
sentences in, labels out; SQuAD's question and context in, the answer and its offsets out; SWAG's context and
four endings in, the chosen ending out; NER's sentence in, word tags and entity spans out).
"""
