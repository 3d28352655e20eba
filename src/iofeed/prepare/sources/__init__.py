"""The inputs `iofeed preprocess` reads: one module per source kind, chosen by `runtime/registry.py`."""
