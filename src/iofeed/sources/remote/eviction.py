"""The cache's node-wide eviction lock, least-recently-used eviction of unleased shards under the
limit, and the part files of dead downloads removed."""
from __future__ import annotations

import fcntl
import os
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path

from ...format.files import lock_free, try_lock
from .cache_dir import EVICT_LOCK, LOCK, PART, entries, is_part, is_shard


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


def part_is_orphan(path: str) -> bool:
    """A part file with no writer left: its process is gone, or (a PID reused since, or one of
    another PID namespace) nobody holds its shard's download lock, which a writer holds throughout."""
    name = os.path.basename(path)
    pid = name.rsplit(PART, 1)[1].split("-")[0]
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return True
    except (ValueError, PermissionError):
        pass
    return lock_free(os.path.join(os.path.dirname(path), name.split(PART)[0] + LOCK)) is not False


def remove_stale_parts(root: Path) -> int:
    """Delete the part files of downloads whose writer is gone (see `part_is_orphan`); how many."""
    removed = 0
    with eviction_lock(root):
        for name, path, _ in list(entries(root)):
            if is_part(name) and part_is_orphan(path):
                Path(path).unlink(missing_ok=True)
                removed += 1
    return removed


def _try_evict(path: str) -> bool:
    """Delete a cached shard unless someone holds a lease on it."""
    with try_lock(path) as held:
        if held:
            os.unlink(path)  # under the lock: a reader blocked on it then sees the file unlinked
        return held is not False


def evict_for(root: Path, limit: int, size: int) -> tuple[bool, int]:
    """Evict unleased shards of the cache at `root` (oldest use first) until `size` more bytes fit
    under `limit`; whether they do, and the bytes held. Called under `eviction_lock`."""
    shards, used = [], 0
    for name, path, stat in entries(root):
        if is_part(name) and part_is_orphan(path):
            Path(path).unlink(missing_ok=True)
        elif is_shard(name) or is_part(name):
            used += stat.st_size
            if is_shard(name):
                shards.append((stat.st_mtime, path, stat.st_size))
    for _, path, bytes_ in sorted(shards):
        if used + size <= limit:
            break
        if _try_evict(path):
            used -= bytes_
    return used + size <= limit, used
