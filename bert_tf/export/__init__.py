"""Exporting fine-tuned models for TensorFlow Serving, and the clients that call them.

  serving   export_classifier: a versioned SavedModel that takes raw text (tokenizer in the graph), with
            warmup requests and a manifest of what serving it needs
  requests  client helpers: the REST body and URL, the gRPC PredictRequest, sending them, running locally
"""
