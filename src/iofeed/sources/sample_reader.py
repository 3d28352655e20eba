"""Reading a `SampleSource`'s samples in one process: encoded bytes by `pread`, raw pixels as views
of memory-mapped shards; shards kept open (bounded, least recently used closed), streamed shards
leased from the node cache only while batches read them."""
from __future__ import annotations

import errno
import mmap
import os
import resource
import time
from collections import OrderedDict

import numpy as np

from ..errors import DatasetError, FetchError, IofeedError, SampleError, WorkerError
from ..format.files import descriptor_error, open_regular
from .samples import SampleSource


def _open_checked(source: SampleSource, file_id: int) -> int:
    """A descriptor of local shard `file_id`, opened before its dataset is checked unchanged."""
    fd = open_regular(source.files[file_id])
    try:
        source.check_unchanged(file_id)
    except DatasetError:
        os.close(fd)
        raise
    return fd


def _local_open_limit() -> int:
    """Local shards one reader keeps open: a quarter of the open-file limit (a mapped shard holds two
    descriptors, and the process has its own), at most 4096; the least recently used are closed beyond it."""
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    return max(4, min(4096, (soft if soft != resource.RLIM_INFINITY else 16384) // 4))


def _read_error(exc: OSError, path: bytes) -> IofeedError:
    """A read that failed: SampleError (skipped or raised by `on_error`) for the sample's own fault,
    an error of its own for the machine's (out of descriptors or memory), which no skip would mend."""
    if exc.errno == errno.ENOMEM:
        return WorkerError(f"{os.fsdecode(path)}: out of memory mapping or reading it: raise the memory limit "
                           "(`ulimit -v`, the container's), or lower workers or batch_size")
    error = descriptor_error(exc, path)
    return error if isinstance(error, IofeedError) else SampleError(f"unreadable ({exc.strerror})")


# Whole shards mapped up front (MAP_POPULATE, Linux): far cheaper than faulting pages in one by one
# as raw samples are touched (measured: docs/decisions/0061-sample-reader-maps-whole-shards-up-front.md).
MAP_FLAGS = mmap.MAP_SHARED | getattr(mmap, "MAP_POPULATE", 0)


class SampleReader:
    """Reads samples: encoded bytes, or raw pixels as views of memory-mapped shards. Keeps
    shard files open and mapped (one reader per process); for a streamed dataset, the cached
    copies it holds are leased (never evicted): at most `remote.open_limit` at a time, and only
    those the current or the previous batch read."""

    def __init__(self, source: SampleSource) -> None:
        self._source = source
        self._handles: OrderedDict[int, int] = OrderedDict()  # least recently opened first
        self._maps: dict[int, mmap.mmap] = {}
        self._failed: dict[int, tuple[str, float]] = {}  # streamed shards that failed: (reason, when)
        self._touched: set[int] = set()  # shards read in the current batch
        self._epoch: int | None = None  # the epoch of the current batch: failures are remembered within it

    def _fd(self, file_id: int) -> int:
        """An open descriptor of shard `file_id` (a leased cached copy for a streamed dataset)."""
        self._touched.add(file_id)
        fd = self._handles.get(file_id)
        if fd is not None:
            self._handles.move_to_end(file_id)
            return fd
        remote = self._source.remote
        if remote is None:
            while len(self._handles) >= _local_open_limit():  # when the hard limit is low (see raise_open_limit)
                self._release(next(iter(self._handles)))
            fd = _open_checked(self._source, file_id)
        elif file_id in self._failed and time.monotonic() - self._failed[file_id][1] < remote.cache.retry.budget:
            raise FetchError(self._failed[file_id][0])  # its other samples skip at once, for the retry budget
        else:
            self._release_stale()  # before asking room for another shard, or waiting for its download
            while len(self._handles) >= remote.open_limit:
                self._release(next(iter(self._handles)))
            try:
                fd = remote.acquire(file_id)
            except FetchError as exc:
                self._failed[file_id] = (str(exc), time.monotonic())  # tried again after the budget
                raise
        self._handles[file_id] = fd
        return fd

    def _release(self, file_id: int) -> None:
        """Close shard `file_id` (a map still viewed by an array stays, and leased, until it is freed)."""
        os.close(self._handles.pop(file_id))
        mapped = self._maps.pop(file_id, None)
        if mapped is not None:
            try:
                mapped.close()
            except BufferError:
                pass

    def pixels(self, index: int) -> np.ndarray:
        """Raw sample `index` as a read-only (height, width, 3) uint8 view of its shard's map."""
        src = self._source
        file_id, offset = int(src.file_id[index]), int(src.offset[index])
        shape = (int(src.height[index]), int(src.width[index]), 3)
        mapped = self._maps.get(file_id)
        try:
            if mapped is None:
                fd = self._fd(file_id)
                mapped = self._maps[file_id] = mmap.mmap(fd, 0, flags=MAP_FLAGS, prot=mmap.PROT_READ)
        except OSError as exc:
            raise _read_error(exc, src.files[file_id]) from None
        except ValueError:  # mmap refuses an empty file
            raise SampleError("shard is empty (run `iofeed preprocess` again)") from None
        if offset + int(src.size[index]) > len(mapped) or shape[0] * shape[1] * 3 != int(src.size[index]):
            raise SampleError("shard is truncated or the index does not match it (run `iofeed preprocess` again)")
        return np.frombuffer(mapped, np.uint8, count=int(src.size[index]), offset=offset).reshape(shape)

    def read(self, index: int, span: tuple[int, int] | None = None) -> bytes:
        """The encoded bytes of sample `index` (or of another member of it, at `span` (offset, size)
        in its shard); SampleError says why they cannot be read."""
        src = self._source
        file_id, size = int(src.file_id[index]), int(src.size[index]) if span is None else int(span[1])
        offset = int(src.offset[index]) if span is None else int(span[0])
        try:
            if size < 0:  # a folder's file, checked regular again: a FIFO put there since the scan would block
                with os.fdopen(open_regular(src.files[file_id]), "rb") as f:
                    return f.read()
            data = os.pread(self._fd(file_id), size, offset)
        except OSError as exc:
            raise _read_error(exc, src.files[file_id]) from None
        except DatasetError:
            if size >= 0:  # a shard that is not a regular file: the dataset's fault, not one sample's
                raise
            raise SampleError("not a regular file") from None  # the scan's reason for the same
        if len(data) != size:
            raise SampleError("shard is truncated (run `iofeed preprocess` again)")
        return data

    def begin_batch(self, epoch: int) -> None:
        """A batch of `epoch` starts: the fetch failures remembered in another epoch are forgotten, so
        a later epoch tries those shards again and never skips samples for an earlier failure."""
        if epoch != self._epoch:
            self._epoch, self._failed = epoch, {}

    def _release_stale(self) -> None:
        """End the leases on shards the current batch has not read."""
        for file_id in [f for f in self._handles if f not in self._touched]:
            self._release(file_id)

    def end_batch(self) -> None:
        """A batch is done: keep the streamed shards it read (the next batch of a block order
        mostly reads them again), end the leases on the others, so that a reader never holds
        back the eviction of shards it has stopped reading (local shards stay open)."""
        if self._source.remote is not None:
            self._release_stale()
        self._touched = set()

    def close(self) -> None:
        """Close the shard files and maps (a map still viewed by an array stays until it is freed)."""
        for file_id in list(self._handles):
            self._release(file_id)
