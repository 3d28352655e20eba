"""Tar shards read whole, as WebDataset groups them: every member up to the end-of-archive marker
(else the shard is damaged and all it held is rejected with it), members grouped by key, and the
samples no reader could use named: a member twice, a key split apart, sparse and link members.
v7, ustar, GNU and pax tars are read; compressed ones (gzip, bz2, xz) are copied out uncompressed
when a spool folder is given (preprocess), and rejected by name otherwise (`index` reads in place)."""
from __future__ import annotations

import bz2
import gzip
import lzma
import os
import stat
import tarfile
import tempfile
import zlib
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from io import BufferedIOBase
from pathlib import Path
from typing import Any

from ...sources.folder_scan import Rejection
from .spool import copy_within, spool_room

BLOCK = 512  # a tar block: headers and data start on these
Members = dict[str, tuple[int, int]]  # extension -> (data offset, size)

COMPRESSED: dict[bytes, tuple[str, Callable[..., BufferedIOBase]]] = {
    b"\x1f\x8b": ("gzip", gzip.open), b"BZh": ("bz2", bz2.open), b"\xfd7zXZ\x00": ("xz", lzma.open),
}
DECOMPRESS_ERRORS = (OSError, EOFError, lzma.LZMAError, zlib.error)


@dataclass
class ShardRead:
    """What one shard holds: usable samples by key (spans in `path`), and what was left out."""

    path: str  # the file the spans point into (a decompressed copy for a compressed shard)
    samples: dict[str, Members] = field(default_factory=dict)
    rejected: list[Rejection] = field(default_factory=list)
    usable: bool = True  # False: the shard itself was rejected (damaged, not a tar, compressed)


def split_member(name: str) -> tuple[str, str]:
    """(key, extension) of a member name as WebDataset reads it: the key runs to the first dot of
    the base name (folders included), the extension is the rest."""
    dot = name.find(".", name.rfind("/") + 1)
    return (name, "") if dot < 0 else (name[:dot], name[dot + 1:])


def header_ok(block: bytes) -> bool:
    """Whether `block` is a tar header with a valid checksum (v7, ustar, GNU or pax alike)."""
    if len(block) < BLOCK or not block.strip(b"\0"):
        return False
    try:
        return tarfile.nti(block[148:156]) in tarfile.calc_chksums(block)  # type: ignore[attr-defined]  # not in typeshed
    except tarfile.HeaderError:
        return False


def compression(path: str | Path) -> str | None:
    """'gzip', 'bz2' or 'xz' for a compressed file whose content starts with a tar header."""
    try:
        with open(path, "rb") as f:
            head = f.read(6)
        kind = next(((name, opener) for magic, (name, opener) in COMPRESSED.items() if head.startswith(magic)), None)
        if kind is None:
            return None
        with kind[1](path, "rb") as f:
            return kind[0] if header_ok(f.read(BLOCK)) else None
    except DECOMPRESS_ERRORS:
        return None


def is_tar(path: str | Path) -> bool:
    """Whether the file at `path` is a tar (any header format) or a compressed tar, by content."""
    try:
        with open(path, "rb") as f:
            head = f.read(BLOCK)
    except OSError:
        return False
    return header_ok(head) or compression(path) is not None


def read_shard(path: str, name: str, spool: Path | None = None, room: int | None = None) -> ShardRead:
    """Every sample of the tar at `path` (`name` is how rejections call it: its path or URL). A
    compressed tar is copied out uncompressed into `spool` (at most `room` bytes, by default the
    spool disk's free space less a reserve: `spool_room`), or rejected when there is none; a FIFO
    or a device named like a shard is rejected by name, never opened (a read would wait for ever)."""
    try:
        regular = stat.S_ISREG(os.stat(path).st_mode)
    except OSError:
        regular = True  # said below, as an unreadable shard
    if not regular:
        return _rejected_whole(path, name, "not a regular file (a FIFO or a device: reading it would block)",
                               count=False)
    kind = compression(path)
    if kind is not None:
        if spool is None:
            return _rejected_whole(path, name, f"compressed tar ({kind}: shards are read in place by offset; "
                                   "decompress it and index the .tar)")
        path = _decompressed(path, name, kind, spool, room)
    result = ShardRead(path)
    try:
        entries, damage = _members(path)
    except tarfile.TarError as exc:  # its first block is no tar header: nothing to count in it
        return _rejected_whole(path, name, f"not a tar shard ({exc}; pass WebDataset .tar shards)", count=False)
    except OSError as exc:  # a broken link, a folder, no permission
        return _rejected_whole(path, name, f"unreadable shard ({exc.strerror or exc})", count=False)
    if damage is not None:
        return _rejected_whole(path, name, f"damaged tar ({damage})")
    _group(entries, name, result)
    return result


def _members(path: str) -> tuple[list[tarfile.TarInfo], str | None]:
    """The shard's members and, when it does not end in an end-of-archive marker, why (TarError
    when its first header is not a tar header)."""
    entries: list[tarfile.TarInfo] = []
    size = os.path.getsize(path)
    with tarfile.open(path, "r:") as tar:
        try:
            for info in tar:
                entries.append(info)
        except tarfile.TarError as exc:  # "unexpected end of data": a member's data cut short
            if "end of data" not in str(exc):
                return entries, f"unreadable member{_after(entries)}: {exc}"
            return entries, f"truncated: it ends at byte {size:,}{_after(entries)}, before its end-of-archive marker"
        end = tar.offset  # where tarfile stopped: a zero block, or the header it could not read
    if end + BLOCK > size:
        return entries, f"truncated: it ends at byte {size:,}{_after(entries)}, before its end-of-archive marker"
    with open(path, "rb") as f:
        f.seek(end)
        if f.read(BLOCK).strip(b"\0"):
            return entries, f"unreadable header at byte {end:,}{_after(entries)}"
        for block in iter(lambda: f.read(1 << 16), b""):
            if block.strip(b"\0"):
                return entries, (f"data after its end-of-archive marker at byte {end:,} (tars joined with cat? "
                                 "re-create it as one tar)")
    return entries, None


def _after(entries: list[tarfile.TarInfo]) -> str:
    return f" after member {entries[-1].name}" if entries else ""


def _group(entries: Iterable[tarfile.TarInfo], name: str, result: ShardRead) -> None:
    """Members grouped by key into `result.samples`; a key whose members a reader could take
    another way (twice the same member, split apart, sparse, a link) is rejected whole."""
    bad: dict[str, str] = {}
    runs: Counter[str] = Counter()
    previous = None
    for info in entries:
        if info.isdir():
            continue
        key, ext = split_member(info.name)
        if key != previous:
            runs[key] += 1
            previous = key
        members = result.samples.setdefault(key, {})
        if key in bad:
            continue
        if runs[key] > 1:
            bad[key] = f"key repeated apart ({key}: its members are not together, so webdataset reads each " \
                       "group as a sample of its own)"
        elif ext in members:
            bad[key] = f"duplicate member ({info.name} twice: which one is meant is unknown)"
        elif info.issparse():
            bad[key] = f"sparse member ({info.name}: its bytes are not stored as one span; re-create the tar " \
                       "without --sparse)"
        elif not info.isfile():
            bad[key] = f"link or special member ({info.name}: only regular files are read)"
        else:
            members[ext] = (info.offset_data, info.size)
    for key, reason in bad.items():  # one rejection per sample a WebDataset reader would see
        del result.samples[key]
        result.rejected += [Rejection(f"{name}#{key}", reason)] * runs[key]
    for key in [k for k, members in result.samples.items() if not members]:
        del result.samples[key]


def _rejected_whole(path: str, name: str, reason: str, count: bool = True) -> ShardRead:
    """The shard rejected with every sample it held (as far as its headers can still be found,
    when `count`), or by its own name when none can be."""
    keys = _keys_anyway(path) if count else []
    if not keys:
        return ShardRead(path, rejected=[Rejection(name, f"{reason}; no sample could be read from it")], usable=False)
    reason = f"{reason}; its {len(keys)} samples are rejected with it"
    return ShardRead(path, rejected=[Rejection(f"{name}#{key}", reason) for key in keys], usable=False)


def _keys_anyway(path: str) -> list[str]:
    """The sample keys of a damaged or compressed tar, skipping what cannot be read."""
    keys: dict[str, None] = {}
    try:
        with tarfile.open(path, "r:*", ignore_zeros=True) as tar:
            for info in tar:
                if not info.isdir():
                    keys[split_member(info.name)[0]] = None
    except (tarfile.TarError, *DECOMPRESS_ERRORS):
        pass  # the keys found so far: all that can be told
    return list(keys)


def _decompressed(path: str, name: str, kind: str, spool: Path, room: int | None) -> str:
    """An uncompressed copy of the compressed tar at `path`, in `spool`, within `room` bytes (None:
    `spool_room`); SourceError naming the shard (`name`) past it (`copy_within`)."""
    spool.mkdir(parents=True, exist_ok=True)
    room = spool_room(spool) if room is None else room
    opener = next(opener for label, opener in COMPRESSED.values() if label == kind)
    with opener(path, "rb") as src:
        fd, target = tempfile.mkstemp(suffix=".tar", dir=spool)
        os.close(fd)
        copy_within(_pieces(src), Path(target), room, name, "decompressed")
    return target


def _pieces(src: Any) -> Iterator[bytes]:
    """The decompressed bytes of `src` in pieces, up to where a damaged stream breaks (read1: a cut
    stream keeps what came before; what came out is read, and ends without its marker)."""
    while True:
        try:
            piece = src.read1(1 << 16)  # a gzip, bz2 or lzma file
        except DECOMPRESS_ERRORS:
            return
        if not piece:
            return
        yield piece
