"""The tokenizer `captions_speed.py` runs in the loader's workers (a module they can import)."""
from __future__ import annotations


def utf8_ids(text: str) -> list[int]:
    """A caption's UTF-8 bytes as ids (a byte-level tokenizer's cost, no vocabulary)."""
    return list(text.encode("utf-8"))
