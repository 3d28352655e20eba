"""The per-split sample table: one numpy structured row per sample, saved as `.npy`."""
from __future__ import annotations

import json
import os
from pathlib import Path
from typing import BinaryIO

import numpy as np

from ..errors import DatasetError
from .files import open_regular, read_regular

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
SOURCES = ".sources.jsonl"  # beside `<split>-samples.npy`: each row's source path as a JSON string


def new_table(rows: int) -> np.ndarray:
    """An all-zero table with `rows` rows."""
    return np.zeros(rows, dtype=SAMPLE_DTYPE)


def save_table(path: Path, table: np.ndarray, sources: list[str]) -> None:
    """Save the table and, beside it, the source path of each row (one JSON string per line,
    so any file name, newlines included, reads back as it was)."""
    np.save(Path(path), table, allow_pickle=False)
    text = "".join(json.dumps(s) + "\n" for s in sources)
    Path(path).with_suffix(SOURCES).write_text(text, encoding="ascii")


def load_table(path: Path | BinaryIO, where: str | None = None) -> np.ndarray:
    """Load a table saved by `save_table`, from a path or a file object of its bytes read from
    `where` (for messages); DatasetError when it is missing or malformed."""
    where = str(path) if where is None else where
    try:
        if hasattr(path, "read"):
            table = np.load(path, allow_pickle=False)
        else:
            with os.fdopen(open_regular(path), "rb") as f:
                table = np.load(f, allow_pickle=False)
    except (OSError, ValueError, EOFError) as exc:
        raise DatasetError(f"unreadable sample table {where}: {exc} (run `iofeed preprocess` again)") from None
    if not isinstance(table, np.ndarray) or table.ndim != 1:
        raise DatasetError(f"{where} is not a sample table (run `iofeed preprocess` again)")
    if table.dtype == SAMPLE_DTYPE:
        return table
    if set(table.dtype.names or ()) == set(SAMPLE_DTYPE.names) - {"encoding"}:  # format version 1: all JPEG
        upgraded = new_table(len(table))
        for name in table.dtype.names:
            upgraded[name] = table[name]
        return upgraded
    raise DatasetError(f"{where}: unexpected sample table layout {table.dtype} (run `iofeed preprocess` again)")


def load_sources(path: Path) -> list[str]:
    """The source path of each row of the table at `path` (datasets before format version 3
    have a `.sources.txt` of plain lines)."""
    jsonl = Path(path).with_suffix(SOURCES)
    try:
        if os.path.lexists(jsonl):
            return [json.loads(line) for line in read_regular(jsonl).decode("utf-8").splitlines()]
        return read_regular(Path(path).with_suffix(".sources.txt")).decode("utf-8").splitlines()
    except (OSError, ValueError) as exc:
        raise DatasetError(f"unreadable source list beside {path}: {exc} (run `iofeed preprocess` again)") from None
