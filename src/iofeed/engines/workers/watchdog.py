"""The watchdog over the workers: a worker with a task that makes no progress (stopped with SIGSTOP,
a read hung on a network filesystem, a transform that never returns) is named with the sample and
the stage it is in, after `IOFEED_STALL_WARN_SECONDS` (a warning) and `IOFEED_STALL_SECONDS` (a
`WorkerError`), instead of stalling the loader for ever without a word.

Each worker counts its marks (every sample and step) and finished tasks in its `worker_status.WorkerStatus`
record; the consumer, while it waits for a batch, compares the counts with what it saw last, on
its own clock: no clock is shared between processes.
"""
from __future__ import annotations

import os
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass

from ...errors import OptionError, WorkerError
from ...sources.samples import SampleSource
from .worker_status import WorkerStatus

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
    marks: int  # the worker's marks when last seen to change
    since: float  # when that was, on the consumer's clock
    warned: bool = False


class Watchdog:
    """The checks over the busy workers, each read through its `WorkerStatus` record. `bounds` (warn
    after, raise after) default to the environment's (`stall_bounds()`)."""

    def __init__(self, source: SampleSource, transform: str | None = None,
                 bounds: tuple[float, float] | None = None, clock: Callable[[], float] | None = None) -> None:
        self._watched: dict[int, _Watched] = {}  # by id of the worker's WorkerStatus
        self._source, self._transform, self._clock = source, transform, clock
        self.warn_after, self.raise_after = bounds or stall_bounds()

    @property
    def poll_seconds(self) -> float:
        """How often to look while waiting: a quarter of the shorter bound, within 0.01 to 5 s."""
        return min(max(min(self.warn_after, self.raise_after) / 4, 0.01), 5.0)

    def now(self) -> float:
        """The consumer's clock (`monotonic`, unless one was given)."""
        return (self._clock or monotonic)()

    def started(self, progress: WorkerStatus) -> None:
        """A task was sent to an idle worker: its time starts now."""
        self._watched[id(progress)] = _Watched(progress.marks(), self.now())

    def forget(self, progress: WorkerStatus) -> None:
        """The worker is gone."""
        self._watched.pop(id(progress), None)

    def check(self, busy: list[tuple[WorkerStatus, int, str, int]]) -> None:
        """Warn about (or, past the bound, raise for) each busy worker — (progress, pid, name, tasks
        sent to it) — whose marks have not moved for too long while it had a task to work on. A
        worker still starting (no mark yet) is not judged: its start-up is the machine's time."""
        now = self.now()
        for progress, pid, name, sent in busy:
            marks = progress.marks()
            seen = self._watched.setdefault(id(progress), _Watched(marks, now))
            if marks == 0 or progress.finished() >= sent or marks != seen.marks:  # starting, all done, moving
                seen.marks, seen.since, seen.warned = marks, now, False
                continue
            idle = now - seen.since
            if idle >= self.warn_after and not seen.warned:
                seen.warned = True
                warnings.warn(f"{self.describe(progress, pid, name, idle)}; waiting on, up to {self.raise_after:g} s "
                              f"({RAISE_ENV})", RuntimeWarning, stacklevel=2)
            if idle >= self.raise_after:
                raise WorkerError(f"{self.describe(progress, pid, name, idle)}; stopped waiting after "
                                  f"{self.raise_after:g} s ({RAISE_ENV})")

    def describe(self, progress: WorkerStatus, pid: int, name: str, idle: float) -> str:
        """What the worker is stuck on, in one line."""
        what = progress.describe(self._source, self._transform) or " with a task it has not begun"
        return (f"loader {name} (pid {pid}) has made no progress for {idle:.0f} s{what}: stopped (SIGSTOP, a "
                "debugger), a read hung on its storage, or a transform that does not return?")
