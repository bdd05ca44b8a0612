"""The paper's feature-based studies: contextual features from any layers (google-research's
extract_features.py, `extraction.py`) and the six ways of combining layers of its Table 7 (`choice.py`)."""
