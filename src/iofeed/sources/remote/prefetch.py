"""Downloading a streamed epoch's shards ahead of decoding, in the order the batches will need them."""
from __future__ import annotations

import os
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING

import numpy as np

from .dataset import RemoteShards

if TYPE_CHECKING:
    from ..samples import SampleSource

DOWNLOAD_THREADS = 4  # parallel downloads per loader
MAX_PINNED = 64  # shards one loader keeps pinned (descriptors it holds open)
SCAN = 256  # batches of a pass read at a time for the shards they need
AHEAD = 4 * SCAN  # batches past the consumer's the pass is read to (pins and bytes bound the downloads too)


def first_uses(shard_of: np.ndarray, batches: Sequence[np.ndarray], start: int,
               stop: int | None = None) -> tuple[list[int], dict[int, int]]:
    """Shards of `batches[start:stop]` in order of first use, and the batch number of each one's last use there."""
    stop = len(batches) if stop is None else min(stop, len(batches))
    if start >= stop:
        return [], {}
    part = list(batches[start:stop])
    ids = shard_of[np.concatenate(part)]
    batch_no = np.repeat(np.arange(start, stop), [len(b) for b in part])
    shards, first = np.unique(ids, return_index=True)
    _, from_end = np.unique(ids[::-1], return_index=True)
    last = batch_no[len(ids) - 1 - from_end]
    need = [int(s) for s in shards[np.argsort(first)]]
    return need, {int(s): int(b) for s, b in zip(shards, last)}


class Prefetcher:
    """Fetches the shards of one pass into the node cache ahead of the readers, `DOWNLOAD_THREADS`
    at a time, and pins each (holds a lease) until the consumer has passed its last batch. Pinned
    bytes stay within the cache limit, so what is pinned is never evicted and the limit holds.

    `ahead` says which of the next epoch's batches the engine would start during this pass (it
    may start some once all of the pass's are under way): it is asked once every shard of the pass
    is under way, and their shards are then pinned (or kept pinned) until the pass ends.

    The pass is read `SCAN` batches at a time, at most `AHEAD` past the consumer (an epoch of a
    mixture may hold millions of batches): a shard's last use is its last within what was read when
    the consumer passes it, and a shard used again further on is fetched again (through the node
    cache) when read there."""

    def __init__(self, remote: RemoteShards, shard_of: np.ndarray, batches: Sequence[np.ndarray], start: int,
                 ahead: Callable[[], Sequence[np.ndarray]]) -> None:
        self._remote, self._shard_of, self._end = remote, shard_of, len(batches)  # a position never passed
        self._batches, self._scanned = batches, start
        self._need: list[tuple[int, int]] = []  # (file id, the last batch that needs it), in order of first use
        self._waiting: dict[int, int] = {}  # file id -> its entry in `_need`, not started yet
        self._ahead: Callable[[], Sequence[np.ndarray]] | None = ahead if start < len(batches) else None
        self._last: dict[int, int] = {}  # pinned file id -> the last batch position that needs it
        self._next, self._position, self._reserved = 0, start, 0
        self._pins: dict[int, int | None] = {}  # file id -> leased descriptor (None while downloading)
        self._lock = threading.Lock()
        self._closed = False
        self._cancel = threading.Event()  # set by close(): downloads under way stop (none outlives the loader)
        self._pool = ThreadPoolExecutor(DOWNLOAD_THREADS, thread_name_prefix="iofeed-fetch")
        self._scan()
        self._fill()

    def _scan(self) -> None:
        """Read the pass's next `SCAN` batches: their shards needed in order of first use."""
        stop = min(self._scanned + SCAN, self._end)
        need, last = first_uses(self._shard_of, self._batches, self._scanned, stop)
        self._scanned = stop
        self._add([(s, last[s]) for s in need])

    def _add(self, needs: list[tuple[int, int]]) -> None:
        """Need each (file id, last batch): longer for one pinned or waiting already, else in turn."""
        for file_id, last in needs:
            if file_id in self._pins:  # still pinned for an earlier use: keep it for this one too
                self._last[file_id] = max(self._last[file_id], last)
            elif file_id in self._waiting:
                k = self._waiting[file_id]
                self._need[k] = (file_id, max(self._need[k][1], last))
            else:
                self._waiting[file_id] = len(self._need)
                self._need.append((file_id, last))

    def _size(self, file_id: int) -> int:
        return self._remote.refs[file_id].bytes

    def _fill(self) -> None:
        """Start the next downloads that fit: threads, pins and bytes all bounded."""
        with self._lock:
            while not self._closed and len(self._pins) < MAX_PINNED:
                if self._next == len(self._need):
                    if self._scanned < self._end:
                        if self._scanned >= self._position + AHEAD:
                            return  # `advance` reads on: a pass of millions of batches is not read at once
                        self._scan()
                        continue
                    if self._ahead is None:
                        return
                    batches, self._ahead = self._ahead(), None
                    self._add([(s, self._end) for s in first_uses(self._shard_of, batches, 0)[0]])
                    continue
                file_id, last = self._need[self._next]
                if file_id in self._pins:  # still pinned for an earlier use: keep it for this one too
                    self._last[file_id] = max(self._last[file_id], last)
                    self._take_next(file_id)
                    continue
                running = sum(fd is None for fd in self._pins.values())
                fits = self._reserved + self._size(file_id) <= self._remote.cache.limit or not self._pins
                if running >= DOWNLOAD_THREADS or not fits:
                    return
                self._take_next(file_id)
                self._last[file_id] = last
                self._pins[file_id] = None
                self._reserved += self._size(file_id)
                self._pool.submit(self._fetch, file_id)

    def _take_next(self, file_id: int) -> None:
        """The entry at `_next` (of `file_id`) is started or served by a pin: on to the next."""
        if self._waiting.get(file_id) == self._next:
            del self._waiting[file_id]
        self._next += 1

    def _fetch(self, file_id: int) -> None:
        try:
            fd: int | None = self._remote.acquire(file_id, self._cancel)
        except Exception:  # noqa: BLE001 - a pin left unfinished would stall the prefetcher for good
            fd = None  # the readers report it (FetchError), or try again themselves
        with self._lock:
            if fd is not None and not self._closed and self._last[file_id] >= self._position:
                self._pins[file_id] = fd
                fd = None
            else:
                self._unpin(file_id)
        if fd is not None:
            os.close(fd)
        self._fill()

    def _unpin(self, file_id: int) -> None:
        fd = self._pins.pop(file_id, None)
        del self._last[file_id]
        self._reserved -= self._size(file_id)
        if fd is not None:
            os.close(fd)

    def advance(self, position: int) -> None:
        """The consumer asks for batch `position`: unpin shards no later batch needs, fetch further."""
        with self._lock:
            self._position = position
            for file_id, fd in list(self._pins.items()):
                if fd is not None and self._last[file_id] < position:
                    self._unpin(file_id)
        self._fill()

    def close(self) -> None:
        """Stop fetching and end every pin; downloads under way stop at their next chunk or retry wait."""
        self._cancel.set()
        with self._lock:
            self._closed = True
            for file_id, fd in list(self._pins.items()):
                if fd is not None:
                    self._unpin(file_id)
        self._pool.shutdown(wait=False, cancel_futures=True)


class NoPrefetch:
    """The prefetcher of a local dataset: nothing to fetch."""

    def advance(self, position: int) -> None:
        """Nothing to do."""

    def close(self) -> None:
        """Nothing to do."""


def prefetcher_for(source: SampleSource, batches: Sequence[np.ndarray], start: int,
                   ahead: Callable[[], Sequence[np.ndarray]]) -> Prefetcher | NoPrefetch:
    """A Prefetcher for one pass over a streamed dataset (and the next epoch's batches started
    `ahead` during it); a NoPrefetch for a local one."""
    if source.remote is None:
        return NoPrefetch()
    return Prefetcher(source.remote, source.file_id, batches, start, ahead)
