"""swag: see the modules' docstrings."""
