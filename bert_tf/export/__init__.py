"""Exporting fine-tuned models for TensorFlow Serving, and the clients that call them.

  serving        the one export path: `export_servable` writes <export_dir>/<model_name>/<version>/ atomically,
                 with warmup requests, a manifest (task, signatures, versions, non-core ops) and the vocabulary;
                 and the classifier's export on it (`export_classifier`: raw sentences in, labels out)
  squad_serving  SQuAD: raw question and context in, the answer string and its offsets out
  swag_serving   SWAG: a context and four endings in, their probabilities and the chosen ending out
  ner_serving    CoNLL-2003 NER: a sentence in, word tags and entity spans out
  requests       client helpers: the REST body and URL, the gRPC PredictRequest, sending them, running locally

A task supplies only its `tf.Module` (serving functions over the model and a `GraphTokenizer`), its warmup
examples and its manifest fields.
"""
