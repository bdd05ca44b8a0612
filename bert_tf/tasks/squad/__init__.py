"""squad: see the modules' docstrings."""
