"""What each worker is doing now — which sample, and whether in iofeed's decode or in the user's
transform — in 32 bytes of shared memory per worker, so that when a worker dies (os._exit, a
signal, the memory limit) the consumer's error names the sample and the step; and how far it has
got (marks and tasks finished, counted), so that the watchdog sees a worker that is stuck."""
from __future__ import annotations

import mmap

import numpy as np

from ...sources.samples import SampleSource
from .memory import SharedBlock

IDLE, READING, TRANSFORMING = 0, 1, 2
SLOTS = 4  # [sample index, stage, marks so far, tasks finished]


class WorkerStatus:
    """One worker's record, kept by the consumer: `block` goes in the worker's arguments (the
    worker writes through `worker_view`), `sent()` once the worker has started."""

    def __init__(self) -> None:
        self.block = SharedBlock(8 * SLOTS)
        self._now = np.frombuffer(self.block.mapped(), np.int64, SLOTS)  # keeps the mapping after sent()

    def sent(self) -> None:
        """The worker has its own descriptor: give up ours (the mapping stays)."""
        self.block.release()

    def close(self) -> None:
        """Unmap the record (with the engine's shutdown: a stopped worker is described no more)."""
        self.block.release()
        self._now = np.zeros(SLOTS, np.int64)

    def stage(self) -> int:
        """IDLE, READING or TRANSFORMING."""
        return int(self._now[1])

    def marks(self) -> int:
        """Marks so far: 0 while the worker starts; a count that stands still means no progress."""
        return int(self._now[2])

    def finished(self) -> int:
        """Tasks the worker has finished."""
        return int(self._now[3])

    def describe(self, source: SampleSource, transform: str | None) -> str:
        """What the worker was doing, for its death's message (see `doing`)."""
        return doing(source, int(self._now[0]), self.stage(), transform)


def doing(source: SampleSource, index: int, stage: int, transform: str | None) -> str:
    """' while reading sample PATH', ' while running transform NAME on sample PATH', or '' (idle)."""
    if stage == IDLE or not 0 <= index < len(source.label):
        return ""
    path = source.path_of(index)
    return (f" while running transform {transform} on sample {path}" if stage == TRANSFORMING and transform
            else f" while reading sample {path}")


def worker_view(mapped: mmap.mmap | None) -> np.ndarray:
    """In a worker: its record as [sample index, stage, marks, tasks finished] (a private one when
    none was given)."""
    return np.zeros(SLOTS, np.int64) if mapped is None else np.frombuffer(mapped, np.int64, SLOTS)


def mark(now: np.ndarray, index: int, stage: int) -> None:
    """Record that this worker is at `stage` of sample `index` (the index first: it is read with the
    stage), and count the mark."""
    now[0] = index
    now[1] = stage
    now[2] += 1


def finish_task(now: np.ndarray) -> None:
    """Record that this worker finished a task (its report follows) and is idle."""
    now[1] = IDLE
    now[3] += 1
    now[2] += 1


