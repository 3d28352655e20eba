"""Dataset verification (`iofeed inspect --verify`): every table and shard index against the
manifest and the shard files, and every label member against its table row."""
from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from ..errors import DatasetError
from .manifest import Manifest
from .shards import IndexedSample, read_index
from .table import ENCODINGS, MEMBER_EXTENSIONS, RAW, load_sources, load_table


@dataclass
class Verification:
    """What a verification read, and every problem it found (empty: the dataset is whole)."""

    samples: int = 0
    shards: int = 0
    problems: list[str] = field(default_factory=list)


def verify_dataset(path: Path) -> Verification:
    """Check the dataset at `path`: reads its tables, indexes and label members, not its images."""
    path = Path(path)
    manifest = Manifest.read(path)
    result = Verification()
    for split, info in manifest.splits.items():
        try:
            table = load_table(path / info.table)
            sources = load_sources(path / info.table)
        except DatasetError as exc:
            result.problems.append(str(exc))
            continue
        if not len(table) == len(sources) == info.samples:
            result.problems.append(f"{split}: the manifest says {info.samples} samples, the table has "
                                   f"{len(table)} rows and the source list {len(sources)}")
        bad_labels = int(((table["label"] < 0) | (table["label"] >= len(manifest.classes))).sum())
        if bad_labels:
            result.problems.append(f"{split}: {bad_labels} labels outside 0..{len(manifest.classes) - 1}")
        for number, shard in enumerate(info.shards):
            result.shards += 1
            rows = table[table["shard"] == number]
            result.samples += len(rows)
            result.problems += _check_shard(path, shard, rows)
    return result


def _check_shard(path: Path, shard: dict, rows: np.ndarray) -> list[str]:
    """The problems of one shard: its size, its index, and each row against its index line."""
    tar = path / shard["name"]
    try:
        size = os.stat(tar).st_size
        entries = read_index(path / shard["index"])
    except OSError as exc:
        return [f"{tar}: {exc.strerror}"]
    except DatasetError as exc:
        return [str(exc)]
    problems = []
    if size != shard["bytes"]:
        problems.append(f"{tar} is {size:,} bytes, the manifest says {shard['bytes']:,}")
    if not len(entries) == len(rows) == shard["samples"]:
        return [*problems, f"{tar}: the manifest says {shard['samples']} samples, the index has {len(entries)} "
                           f"and the table {len(rows)}"]
    fd = os.open(tar, os.O_RDONLY)
    try:
        for row, entry in zip(rows, entries):
            problem = _check_row(fd, size, row, entry)
            if problem:
                problems.append(f"{tar} sample {entry.key}: {problem}")
    finally:
        os.close(fd)
    return problems


def _check_row(fd: int, size: int, row: np.void, entry: IndexedSample) -> str | None:
    """Why a table row and its index line disagree with each other or the shard, or None."""
    ext = MEMBER_EXTENSIONS[ENCODINGS[row["encoding"]]] if row["encoding"] < len(ENCODINGS) else None
    image = entry.members.get(ext) if ext else None
    if image != (int(row["offset"]), int(row["size"])):
        return f"the table points at {int(row['offset'])}+{int(row['size'])}, the index at {image}"
    if "cls" not in entry.members or any(off + n > size for off, n in entry.members.values()):
        return "a member is missing or lies past the end of the shard"
    if row["encoding"] == RAW and int(row["size"]) != int(row["width"]) * int(row["height"]) * 3:
        return f"raw pixels of {int(row['size'])} bytes for {int(row['width'])}x{int(row['height'])}"
    label = os.pread(fd, entry.members["cls"][1], entry.members["cls"][0])
    if label != str(int(row["label"])).encode():
        return f"label member {label!r}, the table says {int(row['label'])}"
    return None
