"""Data: corpus, vocabulary, tokenizer, pretraining records."""
