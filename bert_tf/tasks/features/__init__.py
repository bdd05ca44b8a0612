"""features: see the modules' docstrings."""
