"""The node-local shard cache: whole shards fetched once per node, verified, evicted least-recently-used.

Layout: `<root>/<dataset key>/<shard>~<tag>` (the root marked as iofeed's, and only iofeed's own
names in it ever touched: `cache_dir.py`), where the tag is the shard's sha256 prefix (or its
size, for datasets made before checksums were recorded). A file under its final name is served
only when it is a read-only regular file of the right size: iofeed makes a download read-only
after the bytes on disk matched the manifest's size and sha256, just before renaming it; any
other file there (written by an older iofeed, or touched since) is hashed before it is served,
and fetched again if it differs. Every process of a node uses the same files:

- a download happens under an exclusive `flock` on `<shard>~<tag>.lock` (one per node at a time),
  into `<shard>~<tag>.part-<pid>-<thread>`, allocated at its final size, then renamed (the part
  is created and renamed under the eviction lock, so that scans for room count every byte); a
  part whose shard lock is free has no writer left (its process died) and is removed;
- a reader holds a shared `flock` on the shard file it reads (a lease); eviction takes an
  exclusive non-blocking lock, so a shard in use (or pinned ahead by the prefetcher) is never evicted;
- a shard that could not be fetched leaves `<shard>~<tag>.failed` (its reason), so the processes
  that were waiting for that download report it at once instead of retrying it again; a process
  that asks for the shard later tries it again (a later epoch never inherits the failure);
- a write error of the cache's own disk (full, I/O error, read-only) is a `CacheWriteError`
  naming the cache, the shard and the free space, never a marker.
"""
from __future__ import annotations

import errno
import fcntl
import hashlib
import os
import stat as stat_module
import threading
import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ...errors import CacheWriteError, FetchError
from .cache_dir import FAILED, LOCK, PART
from .download import Cancelled, download
from .eviction import evict_for, eviction_lock, remove_stale_parts
from .fetch_log import fetches_since, log_fetch, log_offset
from .retry import RetryPolicy, describe, policy_from_env, with_retries
from .shardref import WRITABLE, ShardRef, check_bytes, trusted
from .urls import filesystem

__all__ = ["Cancelled", "ShardCache", "ShardRef", "eviction_lock", "remove_stale_parts"]

ROOM_WAIT_SECONDS = 10.0  # how long a fetch waits for leases to end before exceeding the limit
HASH_RATE = 50 << 20  # bytes/s a slow host at least hashes when checking a download
_warned_room: set[str] = set()  # cache roots whose "too small" warning this process has given


@dataclass
class ShardCache:
    """The shards of one dataset URL in the node-local cache at `root`, bounded by `limit` bytes."""

    root: Path
    dataset: str
    limit: int
    settings: dict[str, Any] = field(default_factory=dict)  # the scheme settings, resolved at open
    retry: RetryPolicy = field(default_factory=policy_from_env)
    opened_at: float = field(default_factory=time.time)  # failures noted before are another run's

    @property
    def directory(self) -> Path:
        """This dataset's folder in the cache."""
        return self.root / hashlib.sha256(self.dataset.encode()).hexdigest()[:16]

    def path(self, ref: ShardRef) -> Path:
        """Where the verified copy of `ref` lives."""
        return self.directory / ref.cached_name

    def acquire(self, ref: ShardRef, cancel: threading.Event | None = None) -> int:
        """A read-only descriptor of the verified cached shard holding a lease (fetched first when
        missing or unverified). Closing the descriptor ends the lease; FetchError names the URL when
        it cannot be had (CacheWriteError when the cache cannot store it). Setting `cancel` ends a
        download under way at its next chunk or retry wait (Cancelled)."""
        path = self.path(ref)
        while True:
            fd = self._open_leased(path, ref.bytes)
            if fd is not None:
                try:
                    os.utime(fd)  # the least recently used go first
                except OSError:
                    pass  # another user's file, or a disk turned read-only: served, its age left alone
                return fd
            self._fetch(ref, path, cancel or threading.Event())

    @staticmethod
    def _open_leased(path: Path, size: int) -> int | None:
        try:
            fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
        except (FileNotFoundError, OSError) as exc:
            if isinstance(exc, FileNotFoundError) or exc.errno == errno.ELOOP:
                return None  # missing, or a symbolic link: fetched (again) in its place
            raise
        fcntl.flock(fd, fcntl.LOCK_SH)
        if not trusted(os.fstat(fd), size):  # evicted while we waited, damaged, or never verified
            os.close(fd)
            return None
        return fd

    def _write_error(self, ref: ShardRef, exc: OSError, doing: str) -> CacheWriteError:
        """The error for a failed write (or read back) of `ref` in the cache."""
        try:
            disk = os.statvfs(self.root)
            free = f"{disk.f_bavail * disk.f_frsize:,} bytes and {disk.f_favail:,} inodes free"
        except OSError:
            free = "free space unknown"
        return CacheWriteError(f"shard could not be cached ({ref.url}: {doing} {self.directory} failed: "
                               f"{exc.strerror or type(exc).__name__}; Cache.dir {self.root} has {free}, "
                               f"the shard needs {ref.bytes:,}: free disk, lower Cache.limit or pick another "
                               f"Cache.dir)")

    def _adopt(self, ref: ShardRef, path: Path) -> bool:
        """Whether `path` now holds `ref` verified: trusted as is, or an unverified file (an older
        iofeed's) whose bytes match, made read-only; a file that does not match is removed."""
        try:
            fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
        except OSError:
            self._remove(ref, path)  # missing (nothing to do), or a symbolic link
            return False
        try:
            stat = os.fstat(fd)
            if trusted(stat, ref.bytes):
                return True
            if stat_module.S_ISREG(stat.st_mode) and stat.st_size == ref.bytes and check_bytes(fd, ref) is None:
                os.fchmod(fd, stat.st_mode & ~WRITABLE & 0o7777)
                return True
        finally:
            os.close(fd)
        self._remove(ref, path)  # wrong size or bytes: never served, fetched again
        return False

    def _remove(self, ref: ShardRef, path: Path) -> None:
        """Remove what is under `ref`'s cached name; a CacheWriteError when it cannot be (a folder)."""
        try:
            path.unlink(missing_ok=True)
        except OSError as exc:
            raise self._write_error(ref, exc, f"removing {path.name} from") from None

    def _recent_failure(self, failed: Path, asked: float) -> str | None:
        """The reason another process recorded for this shard's failure while this one was asking for
        it (since `asked`: the failed download is the one it waited for), within the retry budget; a
        note written before it asked is an earlier try's (an earlier epoch's, or another run's) and
        counts for nothing, nor does an empty note: the shard is then tried again. The note's time is
        the failure's own `time.time()` (`_mark_failed` sets it), so no slack is needed: a slack let a
        note written just before asking (a failure of the previous epoch, or of the next epoch's batches
        begun ahead during it) skip the shard in an epoch that started after the server recovered."""
        try:
            noted = failed.stat().st_mtime
            if noted < max(self.opened_at, asked) or time.time() - noted > self.retry.budget:
                return None
            text = failed.read_text(encoding="utf-8").strip()
        except (OSError, UnicodeDecodeError):
            return None
        return text or None

    @staticmethod
    def _mark_failed(failed: Path, message: str) -> None:
        """Record a failure for the other processes (whole or not at all: written aside, renamed;
        a cache too full for it only loses the shortcut). Its mtime is set to the failure's time on
        the clock of `asked` (`time.time()`): the kernel's own file times come from a coarser clock, a
        few ms behind, and the slack that made up for it let an older note pass for a newer one."""
        aside = failed.with_name(f"{failed.name}-{os.getpid()}-{threading.get_ident()}")
        try:
            now = time.time_ns()
            aside.write_text(message, encoding="utf-8")
            os.utime(aside, ns=(now, now))
            os.replace(aside, failed)
        except OSError:
            aside.unlink(missing_ok=True)

    def _fetch(self, ref: ShardRef, path: Path, cancel: threading.Event) -> None:
        """Download `ref` unless another process has (or has failed to) meanwhile; one per node at a time."""
        failed = path.with_name(path.name + FAILED)
        asked = time.time()
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            lock = os.open(path.with_name(path.name + LOCK), os.O_RDWR | os.O_CREAT, 0o666)
        except OSError as exc:
            raise self._write_error(ref, exc, "creating a file in") from None
        try:
            self._wait_for_download_lock(lock, ref, path)
            if self._adopt(ref, path):
                return
            message = self._recent_failure(failed, asked)
            if message is not None:
                raise FetchError(message)
            for stale in path.parent.glob(f"{path.name}{PART}*"):
                stale.unlink(missing_ok=True)
            self._download_verified(ref, path, failed, cancel)
        finally:
            os.close(lock)

    def _wait_for_download_lock(self, lock: int, ref: ShardRef, path: Path) -> None:
        """Take the shard's download lock, waiting for another process's download at most as long as
        one may take under the retry policy; past that its holder is stopped or hung: FetchError."""
        policy, pause = self.retry, 0.01
        limit = (ROOM_WAIT_SECONDS + policy.budget + ref.bytes / HASH_RATE
                 + policy.attempts * (policy.stall_seconds + ref.bytes / policy.min_rate))
        deadline = time.monotonic() + limit
        while True:
            try:
                fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
                return
            except BlockingIOError:
                if time.monotonic() > deadline:
                    break
            time.sleep(pause)
            pause = min(pause * 2, 0.25)
        holders = sorted({p.name.rsplit(PART, 1)[1].split("-")[0] for p in path.parent.glob(f"{path.name}{PART}*")})
        raise FetchError(f"shard could not be fetched ({ref.url}: another process of this node (pid "
                         f"{', '.join(holders) or 'unknown'}) has held its download for over {limit:.0f} s, longer "
                         "than a download may take: is that process stopped or hung?)")

    def _download_verified(self, ref: ShardRef, path: Path, failed: Path, cancel: threading.Event) -> None:
        """Download `ref` into a part file, check the bytes on disk, make it read-only, rename it."""
        part = path.with_name(f"{path.name}{PART}{os.getpid()}-{threading.get_ident()}")
        started = time.perf_counter()
        try:
            fd = self._reserve(part, ref)
            try:
                last_data = [0.0]
                with_retries(lambda: self._download(ref, fd, last_data, cancel), self.retry,
                             last_data=lambda: last_data[0], sleep=cancel.wait)
                os.fchmod(fd, 0o444)
            finally:
                os.close(fd)
            with eviction_lock(self.root):  # a scan for eviction never sees the bytes in neither name
                os.replace(part, path)
        except (CacheWriteError, Cancelled):
            part.unlink(missing_ok=True)
            raise
        except Exception as exc:  # noqa: BLE001 - becomes one FetchError naming the URL
            part.unlink(missing_ok=True)
            message = f"shard could not be fetched ({ref.url}: {describe(exc)})"
            self._mark_failed(failed, message)
            raise FetchError(message) from None
        failed.unlink(missing_ok=True)
        log_fetch(self.directory, ref.url, ref.bytes, time.perf_counter() - started)

    def _reserve(self, part: Path, ref: ShardRef) -> int:
        """Make room for the shard (evicting unleased shards, oldest use first) and create the part
        file with its blocks allocated (a full disk fails here, not mid-download); waits a while for
        leases to end rather than exceed the limit, and says once when it has to."""
        began = time.monotonic()
        deadline = began + ROOM_WAIT_SECONDS
        while True:
            with eviction_lock(self.root):
                fits, used = evict_for(self.root, self.limit, ref.bytes)
                if fits or time.monotonic() > deadline:
                    try:
                        fd = os.open(part, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
                    except OSError as exc:
                        raise self._write_error(ref, exc, "creating a file in") from None
                    try:
                        if ref.bytes:
                            os.posix_fallocate(fd, 0, ref.bytes)
                    except OSError as exc:
                        os.close(fd)
                        raise self._write_error(ref, exc, "allocating space in") from None
                    return fd
            if time.monotonic() - began > ROOM_WAIT_SECONDS / 10:  # not a lease about to end: a wait
                self._warn_room(ref, used)
            time.sleep(0.05)

    def _warn_room(self, ref: ShardRef, used: int) -> None:
        """Warn once per process and cache that fetches wait for room: the limit is too small for
        the shards live at once (leased by readers, pinned ahead)."""
        if str(self.root) in _warned_room:
            return
        _warned_room.add(str(self.root))
        warnings.warn(
            f"iofeed cache {self.root}: Cache.limit={self.limit:,} bytes is too small for the shards live at "
            f"once ({used:,} bytes in use by readers and downloads ahead, about {used // max(ref.bytes, 1)} "
            f"shards of {ref.bytes:,} bytes), so fetching {ref.url} waits up to {ROOM_WAIT_SECONDS:.0f} s for "
            "room (an epoch may run many times slower): raise Cache.limit, or use smaller shards "
            "(`iofeed preprocess --shard-mb`) or a smaller Order.block_shards", RuntimeWarning, stacklevel=2)

    def _download(self, ref: ShardRef, fd: int, last_data: list[float], cancel: threading.Event) -> None:
        """One attempt at streaming `ref` into `fd` (`download.py`), write errors named as the cache's."""
        download(ref, fd, filesystem(ref.url, self.settings, self.retry), self.retry, last_data, cancel,
                 lambda exc, doing: self._write_error(ref, exc, doing))

    def log_offset(self) -> int:
        """The current end of the fetch log."""
        return log_offset(self.directory)

    def fetches_since(self, offset: int) -> list[dict[str, Any]]:
        """Downloads of this dataset on this node logged after `offset` (by any process)."""
        return fetches_since(self.directory, offset)
