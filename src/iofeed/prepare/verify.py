"""Dataset verification (`iofeed inspect --verify`): every table and shard index against the
manifest and the shard files, each shard's size, probe and sha256 against the manifest, every
label member against its table row, each split's targets file against the shards
(`verify_targets.py`), and every stored JPEG decoded."""
from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import DatasetError, SampleError
from ..format.files import open_regular
from ..format.identity import probe_of, sha256_of
from ..format.manifest import Manifest
from ..format.shards import IndexedSample, read_index
from ..format.table import ENCODINGS, MEMBER_EXTENSIONS, RAW, load_sources, load_table, table_problem
from ..image.fastjpeg import check_strictly, decode_problem
from ..image.pil import open_rgb
from ..runtime.progress import progress as progress_bar
from .verify_targets import Found, check_targets, indexed_problems, member_targets


@dataclass
class Verification:
    """What a verification read, and every problem it found (empty: the dataset is whole)."""

    samples: int = 0
    shards: int = 0
    hashed: int = 0  # shards whose sha256 was checked (datasets written before checksums record none)
    decoded: int = 0  # JPEG samples decoded
    streamed: int = 0  # shards at URLs: their index and table checked, the shard itself never fetched
    unread: int = 0  # the samples of those shards
    relabelled: int = 0  # samples of shards indexed in place whose label was read again from the shard
    targets: int = 0  # targets-file rows checked against what the shards say
    problems: list[str] = field(default_factory=list)


def verify_dataset(path: Path, progress: bool = False) -> Verification:
    """Check the dataset at `path`: reads its tables and indexes, hashes every shard and decodes every
    JPEG sample (raw samples are checked by size); with `progress`, a bar (a line now and then in a log)."""
    path = Path(path)
    manifest = Manifest.read(path)
    result = Verification()
    bar = progress_bar(total=sum(info.samples for info in manifest.splits.values()), desc="verify", unit="img",
                       disable=not progress)
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
        kind = manifest.targets.get("kind", "class")
        problem = table_problem(table, len(manifest.classes), [s["bytes"] for s in info.shards],
                                unlabelled=kind != "class")
        if problem:
            result.problems.append(f"{split}: {problem}")
        found: Found = [None] * len(table)  # each row's [classes, extra] as its shard's members say
        for number, shard in enumerate(info.shards):
            result.shards += 1
            where = np.flatnonzero(table["shard"] == number)
            result.samples += len(where)
            if "url" in shard:
                result.problems += _check_indexed_shard(path, shard, table[where], result)
            else:
                result.problems += _check_shard(path, shard, table[where], result, kind, (found, where))
            bar.update(len(where))
        if any("url" in s for s in info.shards):
            reread = indexed_problems(manifest, split, table, sources)
            result.problems += reread.problems
            result.hashed += reread.hashed
            result.relabelled += reread.relabelled
            found = reread.found
        problems = check_targets(path, manifest, split, len(table), found)
        result.problems += problems
        if not problems and manifest.targets.get("files", {}).get(split):
            result.targets += sum(row is not None for row in found)
    bar.close()
    return result


def _check_indexed_shard(path: Path, shard: dict[str, Any], rows: np.ndarray, result: Verification) -> list[str]:
    """The problems of a shard indexed in place (`iofeed index`): its size, each row against the
    index, and every image decoded as the loader would (a streamed shard: the index only)."""
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
        result.streamed += 1
        result.unread += len(rows)
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
            result.decoded += 1
            problem = decode_problem(os.pread(fd, int(row["size"]), int(row["offset"])))
            if problem:
                problems.append(f"{where}@{int(row['offset'])}: {problem} (the loader skips and counts it)")
    finally:
        os.close(fd)
    return problems


def _check_shard(path: Path, shard: dict[str, Any], rows: np.ndarray, result: Verification, kind: str,
                 found: tuple[Found, np.ndarray]) -> list[str]:
    """The problems of one shard: its size and sha256, its index, and each row against its index
    line and its image decoded."""
    tar = path / shard["name"]
    try:
        entries = read_index(path / shard["index"])
        fd = open_regular(tar)
    except OSError as exc:
        return [f"{tar}: {exc.strerror}"]
    except DatasetError as exc:
        return [str(exc)]
    try:
        return _check_open_shard(fd, tar, shard, rows, entries, result, kind, found)
    except OSError as exc:
        return [f"{tar}: {exc.strerror}"]
    finally:
        os.close(fd)


def _check_open_shard(fd: int, tar: Path, shard: dict[str, Any], rows: np.ndarray, entries: list[IndexedSample],
                      result: Verification, kind: str, found: tuple[Found, np.ndarray]) -> list[str]:
    problems = []
    size = os.fstat(fd).st_size
    if size != shard["bytes"]:
        problems.append(f"{tar} is {size:,} bytes, the manifest says {shard['bytes']:,}")
    recorded = shard.get("sha256")
    if recorded or recorded is not None and not isinstance(recorded, str):  # "" or none: written before checksums
        result.hashed += 1
        digest = sha256_of(fd)
        if digest != recorded:
            problems.append(f"{tar} has sha256 {digest}, the manifest says {recorded!r}: its bytes changed")
    if not problems and shard.get("probe") and probe_of(fd, size) != shard["probe"]:
        problems.append(f"{tar}: its sampled blocks do not match the manifest's probe")
    if not len(entries) == len(rows) == shard["samples"]:
        return [*problems, f"{tar}: the manifest says {shard['samples']} samples, the index has {len(entries)} "
                           f"and the table {len(rows)}"]
    rows_found, where = found
    for row, entry, at in zip(rows, entries, where):
        problem = _check_row(fd, size, row, entry, kind) or _check_image(fd, row, result)
        if problem:
            problems.append(f"{tar} sample {entry.key}: {problem}")
            continue
        try:
            rows_found[at] = member_targets(fd, entry, kind)
        except ValueError as exc:
            problems.append(f"{tar} sample {entry.key}: {exc}")
    return problems


def _check_image(fd: int, row: np.void, result: Verification) -> str | None:
    """Why a JPEG sample does not decode as the loader decodes it (strictly), or None."""
    if row["encoding"] == RAW:
        return None
    result.decoded += 1
    try:
        data = os.pread(fd, int(row["size"]), int(row["offset"]))
        open_rgb(data)
        check_strictly(data)
    except SampleError as exc:
        return f"the image does not decode: {exc}"
    return None


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
