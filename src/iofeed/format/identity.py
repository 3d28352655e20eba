"""A shard's identity: what `preprocess` and `iofeed index` record of each tar, so that the loader
can tell at open, cheaply, that the file at a shard's path is still the one its sample table was
made of (not a sibling of the same size, nor the same shard rewritten or edited in place).

Recorded per shard in the manifest: `bytes`, `sha256` (of the whole tar), `probe` (the sha256 of
PROBE_BLOCKS blocks of PROBE_BYTES spread evenly over the tar, the first at offset 0: its first
member header, which names its first sample) and, for shards indexed in place, `mtime_ns`. At open
the loader checks size and probe (one open and 8 reads of 4 KiB per shard); for a shard indexed in
place whose mtime moved it hashes the whole tar against `sha256` (an edit in place the probe would
miss: a `.cls` member rewritten), so touching a shard costs one read, never a wrong label."""
from __future__ import annotations

import hashlib
import os
from typing import Any

from ..errors import DatasetError
from .files import open_regular

PROBE_BLOCKS = 8
PROBE_BYTES = 4096


def probe_of(fd: int, size: int) -> str:
    """The probe of the open file `fd` of `size` bytes: sha256 of its size and sampled blocks."""
    digest = hashlib.sha256(b"%d:" % size)
    last = max(0, size - PROBE_BYTES)
    for k in range(PROBE_BLOCKS):
        digest.update(os.pread(fd, PROBE_BYTES, last * k // (PROBE_BLOCKS - 1)))
    return digest.hexdigest()


def sha256_of(fd: int) -> str:
    """The sha256 of the whole open file `fd` (read with pread: its offset is left alone)."""
    digest, offset = hashlib.sha256(), 0
    while block := os.pread(fd, 8 << 20, offset):
        digest.update(block)
        offset += len(block)
    return digest.hexdigest()


def identity_of(fd: int, *, in_place: bool) -> dict[str, object]:
    """The identity fields of the open tar `fd` for its manifest entry (`mtime_ns` for a shard
    indexed in place, which stays the user's file)."""
    info = os.fstat(fd)
    found: dict[str, object] = {"bytes": info.st_size, "sha256": sha256_of(fd), "probe": probe_of(fd, info.st_size)}
    if in_place:
        found["mtime_ns"] = info.st_mtime_ns
    return found


def identity_problem(fd: int, shard: dict[str, Any]) -> str | None:
    """Why the open tar `fd` is not the shard its manifest entry `shard` describes, or None. Fields
    a manifest lacks (written before they were recorded) are not checked."""
    info = os.fstat(fd)
    if info.st_size != shard["bytes"]:
        return f"is {info.st_size:,} bytes, the manifest says {shard['bytes']:,}: truncated or replaced"
    if shard.get("probe") and probe_of(fd, info.st_size) != shard["probe"]:
        return "is not the shard the manifest was written for (its sampled blocks differ): replaced or rewritten"
    moved = "mtime_ns" in shard and info.st_mtime_ns != shard["mtime_ns"]
    if moved and shard.get("sha256") and sha256_of(fd) != shard["sha256"]:
        return "has changed since it was indexed (its mtime moved and its sha256 differs)"
    return None


def check_identity(path: str, shard: dict[str, Any]) -> None:
    """DatasetError, naming `path`, unless the local tar there is the shard `shard` describes."""
    fd = open_regular(path)
    try:
        problem = identity_problem(fd, shard)
    finally:
        os.close(fd)
    if problem:
        raise DatasetError(f"{path} {problem} (`iofeed inspect --verify` lists what else is wrong; run "
                           "`iofeed preprocess` or `iofeed index` again)")
