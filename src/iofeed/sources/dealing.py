"""One rank's batches of an epoch, each made when asked from the epoch's global order: a pass over
an epoch of billions holds the batches in flight, not the epoch (`OrderSpec.batches` makes them)."""
from __future__ import annotations

import threading
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, overload

import numpy as np

DONE = np.empty(0, np.int64)  # the entry of a batch delivered before a resume


class _Once:
    """The epoch's global order, made on first use and shared by every view of the epoch."""

    def __init__(self, make: Callable[[], Any]) -> None:
        self._make, self._value, self._lock = make, None, threading.Lock()

    def get(self) -> Any:
        with self._lock:
            if self._value is None:
                self._value = self._make()
            return self._value


@dataclass(frozen=True)
class Dealing:
    """Which positions of the global order (`samples` long) one rank's rows are, once `done` of it
    are done: its first `dealt` rows round-robin (row i at `done + rank + i * world_size`), then
    its `run` rows of a padded last round, dealt in runs (rank 0's first) over what is left and
    `pad` repeats after it (from the order's end when `pad_from_end`, else from its start)."""

    samples: int
    done: int
    rank: int
    world_size: int
    dealt: int
    run: int
    pad: int
    pad_from_end: bool

    def positions(self, lo: int, hi: int) -> tuple[list[tuple[int, int, int]], np.ndarray]:
        """Rows [lo, hi) as runs of positions (start, count, step), then the padding rows' positions."""
        runs: list[tuple[int, int, int]] = []
        if min(hi, self.dealt) > lo:
            runs.append((self.done + self.rank + lo * self.world_size, min(hi, self.dealt) - lo, self.world_size))
        a, b = max(lo, self.dealt) - self.dealt, min(hi, self.dealt + self.run) - self.dealt
        if b <= a:
            return runs, np.empty(0, np.int64)
        tail = self.done + self.dealt * self.world_size  # the last round's first position
        left = self.samples - tail  # its samples before the padding
        q0, q1 = self.rank * self.run + a, self.rank * self.run + b  # indices into the last round
        real = max(min(q1, left) - q0, 0)
        if real:
            runs.append((tail + q0, real, 1))
        first = self.samples - self.pad if self.pad_from_end else 0
        padding = (first + np.arange(max(q0, left), q1, dtype=np.int64) - left) % max(self.samples, 1)
        return runs, padding


@dataclass(frozen=True)
class EpochBatches(Sequence[np.ndarray]):
    """This rank's batches of an epoch, entry k batch k (entries before `first` empty: delivered
    before a resume). A batch is made when asked: `batch_size` rows of the `rows` this rank takes
    (its rows past `limit` cut: `OrderSpec.own_samples`). Slicing gives a view of the same kind."""

    order: _Once = field(repr=False)  # the global order: an array, or a `mix_order.MixEpoch`
    dealing: Dealing
    batch_size: int
    first: int
    rows: int
    numbers: range  # the batch numbers this view holds
    limit: int | None = None

    @property
    def samples(self) -> int:
        """Rows this rank's batches hold (the delivered ones' none), for the skip bound."""
        return min(self.rows, self.limit if self.limit is not None else self.rows)

    def limited(self, rows: int) -> EpochBatches:
        """The same batches with the rows past `rows` of this rank cut (the padding)."""
        return replace(self, limit=max(rows, 0))

    def __len__(self) -> int:
        return len(self.numbers)

    @overload
    def __getitem__(self, k: int) -> np.ndarray: ...

    @overload
    def __getitem__(self, k: slice) -> EpochBatches: ...

    def __getitem__(self, k: int | slice) -> np.ndarray | EpochBatches:
        if isinstance(k, slice):
            return replace(self, numbers=self.numbers[k])
        return self._make(self.numbers[k])

    def __iter__(self) -> Iterator[np.ndarray]:
        return (self._make(k) for k in self.numbers)

    def _make(self, k: int) -> np.ndarray:
        if k < self.first:
            return DONE
        lo = (k - self.first) * self.batch_size
        hi = min(lo + self.batch_size, self.samples)
        if hi <= lo:
            return DONE
        runs, padding = self.dealing.positions(lo, hi)
        order = self.order.get()
        parts = [order[start:start + (count - 1) * step + 1:step] for start, count, step in runs]
        parts += [order[p:p + 1] for p in padding.tolist()]
        return np.asarray(np.concatenate(parts), np.int64) if parts else DONE
