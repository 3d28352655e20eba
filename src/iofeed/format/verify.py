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
        no_class = manifest.targets.get("kind", "class") != "class"  # -1: a sample without a class
        bad_labels = int(((table["label"] < (-1 if no_class else 0)) | (table["label"] >= len(manifest.classes))).sum())
        if bad_labels:
            result.problems.append(f"{split}: {bad_labels} labels outside 0..{len(manifest.classes) - 1}")
        for number, shard in enumerate(info.shards):
            result.shards += 1
            rows = table[table["shard"] == number]
            result.samples += len(rows)
            if "url" in shard:
                result.problems += _check_indexed_shard(path, shard, rows)
            else:
                result.problems += _check_shard(path, shard, rows, manifest.targets.get("kind", "class"))
    return result


def _check_indexed_shard(path: Path, shard: dict, rows: np.ndarray) -> list[str]:
    """The problems of a shard indexed in place (`iofeed index`): its size, each row against the
    index, and every image decoded as the loader would (a streamed shard: the index only)."""
    from ..image.fastjpeg import decode_problem

    where = shard["url"]
    try:
        entries = read_index(path / shard["index"])
    except DatasetError as exc:
        return [str(exc)]
    spans = {span for entry in entries for span in entry.members.values()}
    problems = [f"{where}: row at {int(r['offset'])}+{int(r['size'])} is not a member in its index"
                for r in rows if (int(r["offset"]), int(r["size"])) not in spans]
    if len(rows) != shard["samples"]:
        problems.append(f"{where}: the manifest says {shard['samples']} samples, the table has {len(rows)}")
    if "://" in where:
        return problems
    try:
        size = os.stat(where).st_size
        fd = os.open(where, os.O_RDONLY)
    except OSError as exc:
        return [*problems, f"{where}: {exc.strerror}"]
    try:
        if size != shard["bytes"]:
            return [*problems, f"{where} is {size:,} bytes, the index was made of {shard['bytes']:,}: "
                               "index it again (`iofeed index`)"]
        for row in rows:
            problem = decode_problem(os.pread(fd, int(row["size"]), int(row["offset"])))
            if problem:
                problems.append(f"{where}@{int(row['offset'])}: {problem} (the loader skips and counts it)")
    finally:
        os.close(fd)
    return problems


def _check_shard(path: Path, shard: dict, rows: np.ndarray, kind: str = "class") -> list[str]:
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
            problem = _check_row(fd, size, row, entry, kind)
            if problem:
                problems.append(f"{tar} sample {entry.key}: {problem}")
    finally:
        os.close(fd)
    return problems


def _check_row(fd: int, size: int, row: np.void, entry: IndexedSample, kind: str = "class") -> str | None:
    """Why a table row and its index line disagree with each other or the shard, or None."""
    ext = MEMBER_EXTENSIONS[ENCODINGS[row["encoding"]]] if row["encoding"] < len(ENCODINGS) else None
    image = entry.members.get(ext) if ext else None
    if image != (int(row["offset"]), int(row["size"])):
        return f"the table points at {int(row['offset'])}+{int(row['size'])}, the index at {image}"
    label_member = {"class": "cls", "multi_label": "classes.json"}.get(kind)
    if (label_member and label_member not in entry.members) or any(off + n > size for off, n in entry.members.values()):
        return "a member is missing or lies past the end of the shard"
    if kind != "class":
        return None
    if row["encoding"] == RAW and int(row["size"]) != int(row["width"]) * int(row["height"]) * 3:
        return f"raw pixels of {int(row['size'])} bytes for {int(row['width'])}x{int(row['height'])}"
    label = os.pread(fd, entry.members["cls"][1], entry.members["cls"][0])
    if label != str(int(row["label"])).encode():
        return f"label member {label!r}, the table says {int(row['label'])}"
    return None
