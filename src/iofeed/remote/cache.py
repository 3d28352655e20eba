"""The node-local shard cache: whole shards fetched once per node, verified, evicted least-recently-used.

Layout: `<root>/<dataset key>/<shard>~<tag>` where the tag is the shard's sha256 prefix (or its
size, for datasets made before checksums were recorded), so a file under its final name is
always a verified copy of that exact shard. Every process of a node uses the same files:

- a download happens under an exclusive `flock` on `<shard>~<tag>.lock` (one per node at a time),
  into `<shard>~<tag>.part-<pid>-<thread>`, preallocated to its final size, then renamed (the part
  is created and renamed under the eviction lock, so that scans for room count every byte);
- a reader holds a shared `flock` on the shard file it reads (a lease); eviction takes an
  exclusive non-blocking lock, so a shard in use (or pinned ahead by the prefetcher) is never evicted;
- a shard that could not be fetched leaves `<shard>~<tag>.failed`, so the other processes of
  the same run report it at once instead of retrying it again.
"""
from __future__ import annotations

import fcntl
import hashlib
import json
import os
import shutil
import threading
import time
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from ..errors import FetchError, OptionError
from .retry import Mismatch, RetryPolicy, with_retries
from .urls import filesystem, scheme

CHUNK = 4 << 20
ROOM_WAIT_SECONDS = 10.0  # how long a fetch waits for leases to end before exceeding the limit
DISK_RESERVE = 0.1  # the default limit leaves this share of the cache's disk free
PART, LOCK, FAILED = ".part-", ".lock", ".failed"
EVICT_LOCK = ".evict.lock"  # in the cache root
FETCH_LOG = "fetches.jsonl"


def default_cache_dir() -> Path:
    """`IOFEED_CACHE`, else `$XDG_CACHE_HOME/iofeed`, else `~/.cache/iofeed`."""
    if os.environ.get("IOFEED_CACHE"):
        return Path(os.environ["IOFEED_CACHE"])
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "iofeed"


@dataclass(frozen=True)
class ShardRef:
    """One remote shard: its URL, and the size and checksum the manifest records for it."""

    url: str
    bytes: int
    sha256: str = ""  # empty for datasets written before checksums: verified by size only

    @property
    def cached_name(self) -> str:
        """The file name of its verified copy."""
        tag = self.sha256[:16] if self.sha256 else f"size{self.bytes}"
        return f"{self.url.rsplit('/', 1)[-1]}~{tag}"


@contextmanager
def _flocked(path: Path, mode: int) -> Iterator[int]:
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o666)
    try:
        fcntl.flock(fd, mode)
        yield fd
    finally:
        os.close(fd)


def eviction_lock(root: Path) -> AbstractContextManager[int]:
    """The node-wide lock of the cache at `root`, under which cache files appear, are renamed and
    are evicted: what is read under it is a consistent view of the cache's size."""
    return _flocked(root / EVICT_LOCK, fcntl.LOCK_EX)


def _entries(root: Path) -> Iterator[tuple[str, str, os.stat_result]]:
    """(name, path, stat) of every file in the dataset folders of the cache root; files that other
    processes delete meanwhile are left out."""
    if not root.is_dir():
        return
    for folder in os.scandir(root):
        if not folder.is_dir(follow_symlinks=False):
            continue
        for entry in os.scandir(folder.path):
            try:
                yield entry.name, entry.path, entry.stat(follow_symlinks=False)
            except FileNotFoundError:
                continue


def _is_shard(name: str) -> bool:
    return "~" in name and PART not in name and not name.endswith((LOCK, FAILED))


def _part_is_orphan(name: str) -> bool:
    """A part file whose writer process is gone (it crashed or was killed)."""
    pid = name.rsplit(PART, 1)[1].split("-")[0]
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return True
    except (ValueError, PermissionError):
        return False
    return False


def cache_usage(root: Path) -> int:
    """Bytes held by the cache: verified shards and downloads in progress (counted at full size)."""
    return sum(stat.st_size for name, _, stat in _entries(root) if _is_shard(name) or PART in name)


def resolve_limit(root: Path, limit: int | None) -> int:
    """`limit`, or by default what the cache holds now plus the free disk above a 10% reserve."""
    if limit is not None:
        if limit < 1:
            raise OptionError(f"cache_limit must be a positive number of bytes, got {limit}")
        return int(limit)
    disk = shutil.disk_usage(root)
    return max(cache_usage(root) + disk.free - int(disk.total * DISK_RESERVE), 1)


def _try_evict(path: str) -> bool:
    """Delete a cached shard unless someone holds a lease on it."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except FileNotFoundError:
        return True
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        return False
    try:
        os.unlink(path)
    finally:
        os.close(fd)  # closing drops the lock: a reader blocked on it sees the file unlinked
    return True


def _describe(exc: BaseException) -> str:
    if isinstance(exc, FileNotFoundError):
        return "not found"
    if isinstance(exc, Mismatch):
        return str(exc)
    return f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else 'no detail'}"


@dataclass
class ShardCache:
    """The shards of one dataset URL in the node-local cache at `root`, bounded by `limit` bytes."""

    root: Path
    dataset: str
    limit: int
    settings: dict = field(default_factory=dict)  # the scheme's settings, resolved where the dataset was opened
    retry: RetryPolicy = RetryPolicy()
    opened_at: float = field(default_factory=time.time)

    @property
    def directory(self) -> Path:
        """This dataset's folder in the cache."""
        return self.root / hashlib.sha256(self.dataset.encode()).hexdigest()[:16]

    def path(self, ref: ShardRef) -> Path:
        """Where the verified copy of `ref` lives."""
        return self.directory / ref.cached_name

    def acquire(self, ref: ShardRef) -> int:
        """A read-only descriptor of the cached shard holding a lease (fetched first when missing).
        Closing the descriptor ends the lease; FetchError names the URL when it cannot be had."""
        path = self.path(ref)
        while True:
            fd = self._open_leased(path, ref.bytes)
            if fd is not None:
                os.utime(path)  # the least recently used go first
                return fd
            self._fetch(ref, path)

    @staticmethod
    def _open_leased(path: Path, size: int) -> int | None:
        try:
            fd = os.open(path, os.O_RDONLY)
        except FileNotFoundError:
            return None
        fcntl.flock(fd, fcntl.LOCK_SH)
        stat = os.fstat(fd)
        if stat.st_nlink == 0 or stat.st_size != size:  # evicted while we waited, or damaged
            os.close(fd)
            return None
        return fd

    def _fetch(self, ref: ShardRef, path: Path) -> None:
        """Download `ref` unless another process has (or has failed to) meanwhile; one per node at a time."""
        path.parent.mkdir(parents=True, exist_ok=True)
        failed = path.with_name(path.name + FAILED)
        with _flocked(path.with_name(path.name + LOCK), fcntl.LOCK_EX):
            if path.is_file() and path.stat().st_size == ref.bytes:
                return
            if failed.is_file() and failed.stat().st_mtime >= self.opened_at:
                raise FetchError(failed.read_text(encoding="utf-8"))
            path.unlink(missing_ok=True)
            for stale in path.parent.glob(f"{path.name}{PART}*"):
                stale.unlink(missing_ok=True)
            part = path.with_name(f"{path.name}{PART}{os.getpid()}-{threading.get_ident()}")
            started = time.perf_counter()
            try:
                fd = self._reserve(part, ref.bytes)
                try:
                    with_retries(lambda: self._download(ref, fd), self.retry)
                    os.fdatasync(fd)
                finally:
                    os.close(fd)
                with eviction_lock(self.root):  # a scan for eviction never sees the bytes in neither name
                    os.replace(part, path)
            except Exception as exc:  # noqa: BLE001 - becomes one FetchError naming the URL
                part.unlink(missing_ok=True)
                message = f"shard could not be fetched ({ref.url}: {_describe(exc)})"
                failed.write_text(message, encoding="utf-8")
                raise FetchError(message) from None
            failed.unlink(missing_ok=True)
            self._log(ref, time.perf_counter() - started)

    def _reserve(self, part: Path, size: int) -> int:
        """Make room for `size` bytes (evicting unleased shards, oldest use first) and create the part
        file at its full size; waits a while for leases to end rather than exceed the limit."""
        deadline = time.monotonic() + ROOM_WAIT_SECONDS
        while True:
            with eviction_lock(self.root):
                if self._evict_for(size) or time.monotonic() > deadline:
                    fd = os.open(part, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
                    os.ftruncate(fd, size)
                    return fd
            time.sleep(0.05)

    def _evict_for(self, size: int) -> bool:
        """Evict until `size` more bytes fit under the limit; whether they do."""
        shards, used = [], 0
        for name, path, stat in _entries(self.root):
            if PART in name and _part_is_orphan(name):
                Path(path).unlink(missing_ok=True)
            elif _is_shard(name) or PART in name:
                used += stat.st_size
                if _is_shard(name):
                    shards.append((stat.st_mtime, path, stat.st_size))
        for _, path, bytes_ in sorted(shards):
            if used + size <= self.limit:
                break
            if _try_evict(path):
                used -= bytes_
        return used + size <= self.limit

    def _download(self, ref: ShardRef, fd: int) -> None:
        """Stream `ref` into `fd`, checking its size and checksum against the manifest."""
        digest, written = hashlib.sha256(), 0
        with filesystem(ref.url, self.settings).open(ref.url, "rb", **scheme(ref.url).stream) as remote:
            while chunk := remote.read(CHUNK):
                if written + len(chunk) > ref.bytes:
                    raise Mismatch(f"larger than the {ref.bytes} bytes iofeed.json records (replaced after upload?)")
                os.pwrite(fd, chunk, written)
                digest.update(chunk)
                written += len(chunk)
        if written != ref.bytes:
            raise Mismatch(f"{written} bytes where iofeed.json records {ref.bytes} (truncated: upload it again)")
        if ref.sha256 and digest.hexdigest() != ref.sha256:
            raise Mismatch("checksum differs from iofeed.json (corrupt or replaced: upload it again)")

    def _log(self, ref: ShardRef, seconds: float) -> None:
        """Record one download in the dataset folder's fetch log (read by `fetches_since`)."""
        line = json.dumps({"url": ref.url, "bytes": ref.bytes, "seconds": round(seconds, 4), "pid": os.getpid()})
        fd = os.open(self.directory / FETCH_LOG, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, (line + "\n").encode())
        finally:
            os.close(fd)

    def log_offset(self) -> int:
        """The current end of the fetch log."""
        try:
            return (self.directory / FETCH_LOG).stat().st_size
        except FileNotFoundError:
            return 0

    def fetches_since(self, offset: int) -> list[dict]:
        """Downloads of this dataset on this node logged after `offset` (by any process)."""
        try:
            with open(self.directory / FETCH_LOG, "rb") as f:
                f.seek(offset)
                text = f.read().decode()
        except FileNotFoundError:
            return []
        return [json.loads(line) for line in text.splitlines() if line.strip()]
