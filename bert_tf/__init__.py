"""bert_tf: BERT (Devlin et al., 2018) end to end in TensorFlow 2 and Keras 3."""

__version__ = "0.1.0"
