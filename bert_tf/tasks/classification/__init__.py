"""classification: see the modules' docstrings."""
