"""The per-split sample table: one numpy structured row per sample, saved as `.npy`."""
from __future__ import annotations

import json
import os
from pathlib import Path
from typing import BinaryIO, cast

import numpy as np

from ..errors import DatasetError
from .files import open_regular, read_regular
from .shards import BLOCK

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
            table = _load_npy(cast(BinaryIO, path))
        else:
            with os.fdopen(open_regular(path), "rb") as f:
                table = _load_npy(f)
    except (OSError, ValueError, EOFError) as exc:
        raise DatasetError(f"unreadable sample table {where}: {exc} (run `iofeed preprocess` again)") from None
    if not isinstance(table, np.ndarray) or table.ndim != 1:
        raise DatasetError(f"{where} is not a sample table (run `iofeed preprocess` again)")
    if table.dtype == SAMPLE_DTYPE:
        return table
    if set(table.dtype.names or ()) == set(SAMPLE_DTYPE.names or ()) - {"encoding"}:  # format version 1: all JPEG
        upgraded = new_table(len(table))
        for name in table.dtype.names or ():
            upgraded[name] = table[name]
        return upgraded
    raise DatasetError(f"{where}: unexpected sample table layout {table.dtype} (run `iofeed preprocess` again)")


def _load_npy(f: BinaryIO) -> np.ndarray:
    """`np.load` of a seekable `.npy` file object, once its header's shape fits the bytes that follow
    (a header claiming 10^11 rows made numpy try to allocate terabytes: a MemoryError)."""
    start = f.tell()
    version = np.lib.format.read_magic(f)
    read_header = np.lib.format.read_array_header_1_0 if version == (1, 0) else np.lib.format.read_array_header_2_0
    shape, _, dtype = read_header(f)
    need = int(np.prod(shape, dtype=np.float64)) * dtype.itemsize
    data_at = f.tell()
    have = f.seek(0, os.SEEK_END) - data_at
    if need > have:
        raise ValueError(f"its header claims shape {shape} ({need:,} bytes), but {have:,} bytes follow")
    f.seek(start)
    table: np.ndarray = np.load(f, allow_pickle=False)
    return table


def table_problem(table: np.ndarray, classes: int, shard_bytes: list[int], unlabelled: bool = False) -> str | None:
    """What makes `table` impossible for a manifest of `classes` classes and shards of `shard_bytes`
    bytes (labels, encodings, sample extents, raw sizes), or None; vectorised, one pass per column.
    `unlabelled`: the dataset's targets are not one class each, so -1 (no class) is a label too."""
    if not len(table):
        return None
    shard = table["shard"]
    outside = (shard < 0) | (shard >= len(shard_bytes))
    if outside.any():
        return _first(shard, outside, f"shard numbers outside 0..{len(shard_bytes) - 1}")
    label, encoding = table["label"], table["encoding"]
    offset, size = table["offset"], table["size"]
    ends = np.asarray(shard_bytes, np.int64)[shard]
    raw = encoding == RAW
    known = ", ".join(f"{i} {e}" for i, e in enumerate(ENCODINGS))
    checks = (
        ((label < -int(unlabelled)) | (label >= classes),
         f"labels outside {-int(unlabelled)}..{classes - 1} (the manifest has {classes} classes)",
         label),
        (encoding >= len(ENCODINGS), f"unknown encodings (known: {known})", encoding),
        (size < 1, "empty samples (size 0 or less)", size),
        ((offset < 0) | (offset > ends - size), "samples outside their shard", offset),
        (offset % BLOCK != 0, f"samples not at a tar block boundary (offsets are multiples of {BLOCK})", offset),
        (raw & (size != table["width"].astype(np.int64) * table["height"].astype(np.int64) * 3),
         "raw samples whose size is not width x height x 3", size),
    )
    for bad, what, column in checks:
        if bad.any():
            return _first(column, bad, what)
    return None


def _first(column: np.ndarray, bad: np.ndarray, what: str) -> str:
    row = int(np.argmax(bad))
    return f"{int(bad.sum())} row(s) with {what}, first row {row}: {int(column[row])}"


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
