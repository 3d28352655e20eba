"""Output memory an adapter recycles from batch to batch, lent with a lease: it comes back to the
pool only when the last array or tensor over it is gone (`engines/lease.py`), never because a
reference count looked low (docs/decisions/0082-output-memory-comes-back-through-its-lease.md)."""
from __future__ import annotations

from collections import deque
from functools import partial

import numpy as np

from ..engines.lease import Lease, leased

ALIGN = 64  # TensorFlow and XLA take a host array without copying it only when it is this aligned
KEEP = 6  # free blocks kept for reuse: the prefetch depth downstream plus the caller's batch


class OutputPool:
    """Aligned byte blocks for output batches. `take(nbytes)` lends one: a free block of that size
    if one came back, else a new one. A block comes back when its lease is released, i.e. when
    nothing refers to the lent array any more: no view, no tensor made with `torch.from_numpy`, no
    DLPack export, no array a framework aliases. Fresh 38 MB arrays per batch would cost more in
    page faults than the normalisation itself; a batch the consumer keeps is never written again.
    Leases may be released on any thread (frameworks drop arrays on threads of their own)."""

    def __init__(self, keep: int = KEEP) -> None:
        self.keep = keep
        self.made = 0  # blocks allocated so far (a consumer that streams needs a few)
        self._free: deque[np.ndarray] = deque()  # whole blocks, most recently returned last
        self._returned: deque[np.ndarray] = deque()  # appended by leases, on any thread

    def take(self, nbytes: int) -> np.ndarray:
        """`nbytes` of `ALIGN`-aligned memory as a uint8 array, lent until nothing refers to it."""
        self._collect()
        at = next((k for k in range(len(self._free) - 1, -1, -1) if self._free[k].nbytes == nbytes + ALIGN), None)
        if at is None:
            block = np.empty(nbytes + ALIGN, np.uint8)
            self.made += 1
        else:
            block = self._free[at]
            del self._free[at]
        start = -block.ctypes.data % ALIGN
        return leased(block[start:start + nbytes], Lease(partial(self._returned.append, block)))

    def array(self, shape: tuple[int, ...], dtype: np.dtype) -> np.ndarray:
        """A lent, aligned array of `shape` and `dtype` (its memory from `take`)."""
        dtype = np.dtype(dtype)
        return self.take(int(np.prod(shape)) * dtype.itemsize).view(dtype).reshape(shape)

    @property
    def free(self) -> int:
        """Blocks ready for reuse now."""
        self._collect()
        return len(self._free)

    def _collect(self) -> None:
        """Blocks whose leases were released since: free, the `keep` most recent of them."""
        while self._returned:
            self._free.append(self._returned.popleft())
        while len(self._free) > self.keep:
            self._free.popleft()
