"""WebDataset tar shards and their DALI wds2idx ("v1.2") indexes: write and read.

A shard is a plain POSIX ustar archive: per sample one member ``<key>.<ext>`` for each file,
in the order given, with fixed metadata (mtime 0, uid/gid 0, no owner names, mode 0o644),
so the same input gives byte-identical shards. The index next to it is the text format that
DALI's ``fn.readers.webdataset(index_paths=...)`` reads and its ``wds2idx`` tool writes::

    v1.2 <samples>
    <ext> <data offset> <size> <member name> <ext> <data offset> <size> <member name> ...

one line per sample, offsets pointing at the member's data (after its 512-byte header).
"""
from __future__ import annotations

import hashlib
import os
import re
import tarfile
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import BinaryIO

from ..errors import DatasetError, OptionError
from .files import read_regular
from .identity import probe_of

INDEX_VERSION = "v1.2"
BLOCK = 512
RECORD = 20 * BLOCK  # tar's default blocking factor: archives are padded to whole records
_SPLIT = re.compile(r"[A-Za-z0-9_-]+")


@dataclass(frozen=True)
class ShardInfo:
    """One finished shard: tar and index file names (in the writer's directory)."""

    name: str
    index: str
    samples: int
    bytes: int
    sha256: str = ""  # of the tar, so a copy fetched from object storage can be verified
    probe: str = ""  # of sampled blocks, checked at every open (`format/identity.py`)


@dataclass(frozen=True)
class IndexedSample:
    """One index line: the sample key and, per extension, (data offset, size) in the tar."""

    key: str
    members: dict[str, tuple[int, int]]


def _blocks(size: int, unit: int = BLOCK) -> int:
    """``size`` rounded up to a whole number of ``unit``."""
    return -(-size // unit) * unit


def member_after(offset: int, size: int) -> int:
    """The data offset of the member written after one whose data is `size` bytes at `offset`."""
    return offset + _blocks(size) + BLOCK


def _key_of(name: str) -> str:
    """Sample key of a member name: all before the first dot of the basename (as WebDataset)."""
    dot = name.find(".", name.rfind("/") + 1)
    return name if dot < 0 else name[:dot]


def _check_member(key: str, ext: str) -> None:
    """Raise OptionError unless ``key.ext`` reads back as this key and extension everywhere."""
    parts = key.split("/")
    if "." in parts[-1] or "" in parts or ".." in parts or any(c.isspace() for c in key):
        raise OptionError(f"bad sample key {key!r}: need a relative path without whitespace "
                          "whose last part is non-empty and has no '.'")
    if not ext or "/" in ext or ext != ext.lower() or any(c.isspace() for c in ext):
        raise OptionError(f"bad extension {ext!r} for key {key!r}: "
                          "need a lower-case name without '/' or whitespace")


_HEADER_HEAD = b"0000644\x000000000\x000000000\x00"  # mode 0644, uid 0, gid 0
# mtime 0, checksum placeholder, regular file, no link, ustar, no owner names or device numbers
_HEADER_TAIL = b"00000000000\x00" + b" " * 8 + b"0" + bytes(100) + b"ustar\x0000" + bytes(64 + 16 + 155 + 12)


def _header(name: str, size: int) -> bytes:
    """The deterministic 512-byte ustar header of a regular file (as `tarfile` writes it, built
    directly: `TarInfo.tobuf` was a third of the shard writer's time)."""
    encoded = name.encode("utf-8")
    if len(encoded) > 100 or size >= 8**11:  # long names need ustar's prefix field: leave them to tarfile
        return _tarfile_header(name, size)
    header = bytearray(encoded.ljust(100, b"\x00") + _HEADER_HEAD + b"%011o\x00" % size + _HEADER_TAIL)
    header[148:156] = b"%06o\x00 " % sum(header)
    return bytes(header)


def _tarfile_header(name: str, size: int) -> bytes:
    info = tarfile.TarInfo(name)
    info.size, info.mtime, info.mode, info.uid, info.gid, info.uname, info.gname = (
        size, 0, 0o644, 0, 0, "", "")
    try:
        return info.tobuf(tarfile.USTAR_FORMAT, "utf-8", "strict")
    except ValueError as exc:
        raise OptionError(f"member name {name!r} does not fit a ustar header: {exc}") from None


def _sync(f: BinaryIO) -> None:
    """Flush a file to disk (before it is renamed into place)."""
    f.flush()
    os.fsync(f.fileno())


class ShardWriter:
    """Writes <split>-NNNNNN.tar + .idx into a directory, starting a new shard when the current
    one would pass max_bytes (final tar size) or max_samples. Files are written as
    ``*.partial`` and renamed when their shard is finished; a sample bigger than max_bytes
    gets a shard of its own."""

    def __init__(
        self, directory: Path, split: str, max_bytes: int = 256 << 20, max_samples: int = 10_000
    ) -> None:
        if not _SPLIT.fullmatch(split):
            raise OptionError(f"bad split name {split!r}: use letters, digits, '_' or '-'")
        if max_bytes <= 0 or max_samples <= 0:
            raise OptionError(f"max_bytes={max_bytes}, max_samples={max_samples}: both must be > 0")
        self.directory = Path(directory)
        self.directory.mkdir(parents=True, exist_ok=True)
        self.split, self.max_bytes, self.max_samples = split, max_bytes, max_samples
        self._shards: list[ShardInfo] = []
        self._keys: set[str] = set()
        self._out: BinaryIO | None = None
        self._digest = hashlib.sha256()
        self._lines: list[str] = []
        self._size = 0

    def _path(self, number: int, suffix: str) -> Path:
        return self.directory / f"{self.split}-{number:06d}{suffix}"

    def add(self, key: str, files: dict[str, bytes]) -> tuple[int, int, int]:
        """Append one sample (files by extension, e.g. {"jpg": b"...", "cls": b"17"}).

        Returns (shard number, byte offset, size) of the FIRST file's data (the image) inside
        the tar, for the dataset index. Keys must be unique within a shard.
        """
        if not files:
            raise OptionError(f"sample {key!r} has no files")
        for ext in files:
            _check_member(key, ext)
        headers = [_header(f"{key}.{ext}", len(data)) for ext, data in files.items()]
        if key in self._keys:
            raise OptionError(f"duplicate sample key {key!r} in shard {len(self._shards)}")
        need = sum(BLOCK + _blocks(len(data)) for data in files.values())
        if self._out is not None and (
            len(self._lines) >= self.max_samples
            or _blocks(self._size + need + 2 * BLOCK, RECORD) > self.max_bytes
        ):
            self._finish()
        if self._out is None:
            self._out = open(self._path(len(self._shards), ".tar.partial"), "wb")
        self._keys.add(key)
        shard, first = len(self._shards), self._size + BLOCK
        fields = []
        for header, (ext, data) in zip(headers, files.items()):
            fields.append(f"{ext} {self._size + BLOCK} {len(data)} {key}.{ext}")
            for part in (header, data, bytes(_blocks(len(data)) - len(data))):
                self._out.write(part)
                self._digest.update(part)
            self._size += BLOCK + _blocks(len(data))
        self._lines.append(" ".join(fields))
        return shard, first, len(next(iter(files.values())))

    def _finish(self) -> None:
        """Close the open shard: end blocks and record padding, index, fsync, rename."""
        assert self._out is not None, "a shard is open"
        number = len(self._shards)
        total = _blocks(self._size + 2 * BLOCK, RECORD)
        self._out.write(bytes(total - self._size))
        self._digest.update(bytes(total - self._size))
        _sync(self._out)
        self._out.close()
        self._out = None
        head = f"{INDEX_VERSION} {len(self._lines)}"
        text = "".join(f"{line}\n" for line in [head, *self._lines])
        with open(self._path(number, ".idx.partial"), "wb") as out:
            out.write(text.encode("utf-8"))
            _sync(out)
        tar, idx = self._path(number, ".tar"), self._path(number, ".idx")
        os.replace(self._path(number, ".tar.partial"), tar)
        os.replace(self._path(number, ".idx.partial"), idx)
        fd = os.open(tar, os.O_RDONLY)
        try:
            probe = probe_of(fd, total)
        finally:
            os.close(fd)
        self._shards.append(ShardInfo(tar.name, idx.name, len(self._lines), total, self._digest.hexdigest(), probe))
        self._lines, self._keys, self._size, self._digest = [], set(), 0, hashlib.sha256()

    def close(self) -> list[ShardInfo]:
        """Finish the open shard (an empty writer writes nothing); return every shard written."""
        if self._out is not None:
            self._finish()
        return list(self._shards)

    def _abort(self) -> None:
        """Drop the open shard's partial file; finished shards stay."""
        if self._out is not None:
            self._out.close()
            self._out = None
            self._path(len(self._shards), ".tar.partial").unlink(missing_ok=True)

    def __enter__(self) -> ShardWriter:
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        if kind is None:
            self.close()
        else:
            self._abort()


def read_index(path: Path) -> list[IndexedSample]:
    """Parse a wds2idx v1.2 index file; DatasetError names the file and line when malformed."""
    try:
        lines = read_regular(path).decode("utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as exc:
        raise DatasetError(f"cannot read shard index {path}: {exc}") from None
    head = lines[0].split() if lines else []
    if len(head) != 2 or head[0] != INDEX_VERSION or not head[1].isdigit():
        raise DatasetError(f"{path}: not a wds2idx {INDEX_VERSION} index (first line {head})")
    if int(head[1]) != len(lines) - 1:
        raise DatasetError(f"{path}: header says {head[1]} samples, found {len(lines) - 1} lines")
    samples = []
    for number, line in enumerate(lines[1:], start=2):
        fields = line.split()
        members: dict[str, tuple[int, int]] = {}
        keys = set()
        try:
            if not fields or len(fields) % 4:
                raise ValueError("need groups of <ext> <offset> <size> <name>")
            for ext, offset, size, name in zip(*[iter(fields)] * 4):
                if int(offset) % BLOCK or int(size) < 0 or ext in members:
                    raise ValueError(f"bad member {ext} {offset} {size} {name}")
                members[ext] = (int(offset), int(size))
                keys.add(_key_of(name))
            if len(keys) != 1:
                raise ValueError(f"members of different samples {sorted(keys)}")
        except ValueError as exc:
            raise DatasetError(f"{path} line {number}: malformed index ({exc})") from None
        samples.append(IndexedSample(keys.pop(), members))
    return samples


def read_member(tar_path: Path, offset: int, size: int) -> bytes:
    """The ``size`` bytes at ``offset`` of a tar shard (one member's data, by its index entry)."""
    with open(tar_path, "rb") as f:
        f.seek(offset)
        data = f.read(size)
    if len(data) != size:
        raise DatasetError(f"{tar_path} is truncated: {size} bytes at {offset}, got {len(data)}")
    return data
