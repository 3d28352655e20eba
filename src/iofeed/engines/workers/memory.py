"""The slots' memory: one anonymous shared block (memfd), mapped by the consumer and its workers.

It is not a /dev/shm file, so a container's small /dev/shm (Docker's 64 MiB) does not limit it,
and it has no name that could leak: the kernel frees it when the last descriptor and mapping go
(the consumer closed or killed, its workers exited), and a numpy view keeps its mapping alive.
"""
from __future__ import annotations

import mmap
import os
import tempfile
from multiprocessing import reduction
from typing import Any


def _anonymous_fd(size: int) -> int:
    """A descriptor of `size` bytes of memory-backed file without a name: memfd on Linux, else an
    unlinked temporary file."""
    if hasattr(os, "memfd_create"):
        fd = os.memfd_create("iofeed-slots", os.MFD_CLOEXEC)
    else:
        fd, path = tempfile.mkstemp(prefix="iofeed-slots-")
        os.unlink(path)
    os.ftruncate(fd, size)
    return fd


def _attach(handle: Any, size: int) -> mmap.mmap:
    """In a worker: map the block whose descriptor came with the process's arguments."""
    fd = handle.detach()
    try:
        return mmap.mmap(fd, size)
    finally:
        os.close(fd)


class SharedBlock:
    """`size` bytes shared with worker processes: pass the block in a Process's arguments, and the
    worker receives an `mmap` of the same memory (its descriptor travels with the process start)."""

    def __init__(self, size: int) -> None:
        self.size = size
        self._fd: int | None = _anonymous_fd(size)
        self.buffer: memoryview | None = memoryview(mmap.mmap(self._fd, size))  # mmap keeps a dup of the fd

    def __reduce__(self) -> tuple[Any, tuple[Any, int]]:
        if self._fd is None:
            raise ValueError("the shared block was released")
        return _attach, (reduction.DupFd(self._fd), self.size)

    def mapped(self) -> memoryview:
        """The block's memory in this process, to view before `release`."""
        if self.buffer is None:
            raise ValueError("the shared block was released")
        return self.buffer

    def release(self) -> None:
        """Give up the descriptor; the memory goes once no worker and no view maps it (idempotent)."""
        if self._fd is not None:
            os.close(self._fd)
            self._fd = self.buffer = None
