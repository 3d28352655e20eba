"""The inputs `iofeed preprocess` reads: one module per source kind, chosen by `registry.py`."""
