"""The per-split sample table: one numpy structured row per sample, saved as `.npy`."""
from __future__ import annotations

from pathlib import Path
from typing import BinaryIO

import numpy as np

SAMPLE_DTYPE = np.dtype(
    [
        ("shard", np.int32),  # shard number within the split
        ("offset", np.int64),  # byte offset of the image data inside the shard
        ("size", np.int64),  # byte size of the image data
        ("label", np.int64),
        ("width", np.int32),
        ("height", np.int32),
        ("encoding", np.uint8),  # index into ENCODINGS
    ]
)
ENCODINGS = ("jpeg", "raw")  # raw: height x width x 3 uint8 RGB, row-major, no header
RAW = ENCODINGS.index("raw")
MEMBER_EXTENSIONS = {"jpeg": "jpg", "raw": "rgb"}  # the tar member holding each encoding


def new_table(rows: int) -> np.ndarray:
    """An all-zero table with `rows` rows."""
    return np.zeros(rows, dtype=SAMPLE_DTYPE)


def save_table(path: Path, table: np.ndarray, sources: list[str]) -> None:
    """Save the table and, beside it, the source path of each row (one per line)."""
    np.save(Path(path), table, allow_pickle=False)
    text = "".join(f"{s}\n" for s in sources)
    Path(path).with_suffix(".sources.txt").write_text(text, encoding="utf-8", errors="backslashreplace")


def load_table(path: Path | BinaryIO) -> np.ndarray:
    """Load a table saved by `save_table` (from a path, or a file object of its bytes)."""
    table = np.load(path if hasattr(path, "read") else Path(path), allow_pickle=False)
    if table.dtype == SAMPLE_DTYPE:
        return table
    if set(table.dtype.names or ()) == set(SAMPLE_DTYPE.names) - {"encoding"}:  # format version 1: all JPEG
        upgraded = new_table(len(table))
        for name in table.dtype.names:
            upgraded[name] = table[name]
        return upgraded
    raise ValueError(f"{path}: unexpected sample table layout {table.dtype}")


def load_sources(path: Path) -> list[str]:
    """The source path of each row of the table at `path`."""
    return Path(path).with_suffix(".sources.txt").read_text(encoding="utf-8").splitlines()
