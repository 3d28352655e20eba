"""The watchdog over the workers: a worker with a task that makes no progress (stopped with SIGSTOP,
a read hung on a network filesystem, a transform that never returns) is named with the sample and
the stage it is in, after `IOFEED_STALL_WARN_SECONDS` (a warning) and `IOFEED_STALL_SECONDS` (a
`WorkerError`), instead of stalling the loader for ever without a word.

Each worker bumps a counter in its row of a shared block at every sample and stage
(`task.Progress`); the consumer, while it waits for a batch, compares the counters with what it
saw last, on its own clock: no clock is shared between processes.
"""
from __future__ import annotations

import os
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from ...errors import OptionError, WorkerError
from ...samples import SampleSource
from .memory import SharedBlock
from .task import ROW, STAGES

WARN_ENV, RAISE_ENV = "IOFEED_STALL_WARN_SECONDS", "IOFEED_STALL_SECONDS"
DEFAULT_WARN = 60.0  # a sample's read, decode and transform take milliseconds; a huge TIFF seconds
DEFAULT_RAISE = 600.0  # NCCL's own default timeout: a rank stalled longer fails its collectives anyway


def monotonic() -> float:
    """The watchdog's clock: the consumer's own (looked up at each call, so a test can replace it)."""
    return time.monotonic()


def stall_seconds(name: str, default: float) -> float:
    """The seconds set by environment variable `name` (a number > 0; 0 or "off": never), else `default`."""
    text = os.environ.get(name, "").strip()
    if not text:
        return default
    if text.lower() in ("0", "off", "none"):
        return float("inf")
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not value > 0:
        raise OptionError(f"{name}={text!r} is not a number of seconds > 0: set it to one, or to 0 for never")
    return value


def stall_bounds() -> tuple[float, float]:
    """(warn after, raise after) seconds without progress, from the environment or the defaults."""
    return stall_seconds(WARN_ENV, DEFAULT_WARN), stall_seconds(RAISE_ENV, DEFAULT_RAISE)


@dataclass
class _Watched:
    count: int  # the worker's counter when last seen to change
    since: float  # when that was, on the consumer's clock
    warned: bool = False


class Watchdog:
    """Progress rows for up to `workers` workers (twice that: retiring ones keep theirs until they
    go), and the checks over the busy ones. `warn_after` and `raise_after` default to the
    environment's (`bounds()`)."""

    def __init__(self, workers: int, source: SampleSource, bounds: tuple[float, float] | None = None,
                 clock: Callable[[], float] | None = None) -> None:
        rows = 2 * workers
        self.block = SharedBlock(8 * ROW * rows)
        self._table: np.ndarray | None = np.frombuffer(self.block.buffer, np.int64).reshape(rows, ROW)
        self._free = list(range(rows))
        self._watched: dict[int, _Watched] = {}
        self._source, self._clock = source, clock
        self.warn_after, self.raise_after = bounds or stall_bounds()

    @property
    def poll_seconds(self) -> float:
        """How often to look while waiting: a quarter of the shorter bound, within 0.01 to 5 s."""
        return min(max(min(self.warn_after, self.raise_after) / 4, 0.01), 5.0)

    def take_row(self) -> int:
        return self._free.pop(0)

    def give_row(self, row: int) -> None:
        self._watched.pop(row, None)
        self._free.append(row)

    def now(self) -> float:
        """The consumer's clock (`monotonic`, unless one was given)."""
        return (self._clock or monotonic)()

    def started(self, row: int) -> None:
        """A task was sent to an idle worker: its time starts now."""
        if self._table is None:  # closed (by another thread: tf.data runs the loader on its own)
            return
        self._watched[row] = _Watched(int(self._table[row, 0]), self.now())

    def check(self, busy: list[tuple[int, int, str, int]]) -> None:
        """Warn about (or, past the bound, raise for) each busy worker — (row, pid, name, tasks sent
        to it) — whose counter has not moved for too long while it had a task to work on. A worker
        still starting (no mark yet) is not judged: its start-up is the machine's time, not a stall."""
        if self._table is None:
            return
        now = self.now()
        for row, pid, name, sent in busy:
            count, finished = int(self._table[row, 0]), int(self._table[row, 4])
            seen = self._watched.setdefault(row, _Watched(count, now))
            if count == 0 or finished >= sent or count != seen.count:  # starting, all done, or moving
                seen.count, seen.since, seen.warned = count, now, False
                continue
            idle = now - seen.since
            if idle >= self.warn_after and not seen.warned:
                seen.warned = True
                warnings.warn(f"{self.describe(row, pid, name, idle)}; waiting on, up to {self.raise_after:g} s "
                              f"({RAISE_ENV})", RuntimeWarning, stacklevel=2)
            if idle >= self.raise_after:
                raise WorkerError(f"{self.describe(row, pid, name, idle)}; stopped waiting after "
                                  f"{self.raise_after:g} s ({RAISE_ENV})")

    def describe(self, row: int, pid: int, name: str, idle: float) -> str:
        """What the worker of `row` is stuck on, in one line."""
        _, batch_no, index, stage, _ = (int(v) for v in self._table[row])
        doing = STAGES.get(stage, "busy")
        what = f"{doing} sample {self._source.path_of(index)} (batch {batch_no})" if index >= 0 else doing
        return (f"loader {name} (pid {pid}) has made no progress for {idle:.0f} s, {what}: stopped (SIGSTOP, a "
                "debugger), a read hung on its storage, or a transform that does not return?")

    def close(self) -> None:
        """Unmap the rows here and give up the block (workers keep their own mapping until they exit)."""
        self._table = None
        self.block.release()
