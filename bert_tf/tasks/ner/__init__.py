"""ner: see the modules' docstrings."""
