"""Tokenizers for the caption tests, importable by the loader's workers: bytes as ids (exact: the
ids give the caption back), and one that draws from its seeded `rng` (its draws show the seeds)."""
from __future__ import annotations

import numpy as np


def utf8_ids(text: str) -> list[int]:
    """The caption's UTF-8 bytes, each + 1 (0 stays the padding)."""
    return [b + 1 for b in text.encode("utf-8")]


def text_of(ids: np.ndarray, length: int) -> str:
    """`utf8_ids` read back from a padded row."""
    return bytes(int(i) - 1 for i in ids[:length]).decode("utf-8")


def with_draw(text: str, rng: np.random.Generator) -> np.ndarray:
    """`utf8_ids` and, last, one draw of the seeded generator (a caption-dropout stand-in)."""
    return np.array([*utf8_ids(text), int(rng.integers(1, 1 << 30))], np.int64)


def fails_on_seven(text: str) -> list[int]:
    """Raises for the captions of samples whose number ends in 7."""
    if "7 of the set" in text:
        raise ValueError("seven")
    return utf8_ids(text)


def not_ids(text: str) -> str:
    return text
