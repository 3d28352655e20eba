"""One shard streamed into its part file: a stall/rate deadline, never more bytes than the
manifest records, then flushed, read back and checked against its size and sha256."""
from __future__ import annotations

import errno
import os
import threading
import time
from collections.abc import Callable
from typing import Any

from ...errors import CacheWriteError
from .retry import Mismatch, RetryPolicy, TooSlow
from .shardref import CHUNK, ShardRef, check_bytes
from .urls import scheme

WriteError = Callable[[OSError, str], CacheWriteError]  # (the error, what was being done) → the error to raise


class Cancelled(Exception):
    """A download stopped because its requester went away (a closed loader's prefetcher)."""


def download(ref: ShardRef, fd: int, fs: Any, policy: RetryPolicy, last_data: list[float],
             cancel: threading.Event, write_error: WriteError) -> None:
    """Stream `ref` from `fs` into `fd`, then check what the disk holds (flushed, read back: a short
    write or a disk error cannot pass) against the manifest's size and sha256; `last_data` gets the
    time of the last bytes received (time spent streaming is not spent from the budget)."""
    written = 0
    started = time.monotonic()
    deadline = started + policy.stall_seconds + ref.bytes / policy.min_rate
    if cancel.is_set():
        raise Cancelled(ref.url)
    with fs.open(ref.url, "rb", **scheme(ref.url).stream) as remote:
        while chunk := remote.read(CHUNK):
            if cancel.is_set():
                raise Cancelled(ref.url)
            last_data[0] = time.monotonic()
            if last_data[0] > deadline and written + len(chunk) < ref.bytes:
                last_data[0] = 0.0  # a trickle earns no credit: its time is spent from the budget
                raise TooSlow(f"{written + len(chunk):,} of {ref.bytes:,} bytes in {deadline - started:.0f} s, "
                              f"below {policy.min_rate:,.0f} bytes/s")
            if written + len(chunk) > ref.bytes:
                raise Mismatch(f"larger than the {ref.bytes} bytes iofeed.json records (replaced after upload?)")
            _write_all(fd, chunk, written, write_error)
            written += len(chunk)
    if written != ref.bytes:
        raise Mismatch(f"{written} bytes where iofeed.json records {ref.bytes} (truncated: upload it again)")
    try:
        os.fdatasync(fd)
        problem = check_bytes(fd, ref)
    except OSError as exc:
        raise write_error(exc, "writing into") from None
    if problem is not None:
        raise Mismatch(f"checksum differs from iofeed.json ({problem}: corrupt or replaced, upload it again)")


def _write_all(fd: int, data: bytes, offset: int, write_error: WriteError) -> None:
    """Write all of `data` at `offset` (a short write is continued; a failed one is a CacheWriteError)."""
    view = memoryview(data)
    try:
        while view:
            done = os.pwrite(fd, view, offset)
            if done == 0:
                raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
            view, offset = view[done:], offset + done
    except OSError as exc:
        raise write_error(exc, "writing into") from None
