"""Autotuning the workers engine: how many workers keep the consumer from waiting."""
from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass

HEADROOM = 1.2  # decode capacity kept above the consumer's rate
WAIT_SHARE_TO_GROW = 0.05  # the consumer waiting more than this share of its time is starved


@dataclass(frozen=True)
class Window:
    """What happened over one measurement window."""

    images: int  # delivered to the consumer
    seconds: float  # wall time of the window
    wait_seconds: float  # of which the consumer waited for data
    busy_seconds: float  # summed time workers spent decoding
    workers: int


@dataclass(frozen=True)
class Decision:
    """The worker count to run and why."""

    workers: int
    reason: str


def decide(window: Window, max_workers: int) -> Decision:
    """Workers needed so that decode capacity covers the consumer's own rate with headroom.

    The consumer's rate is images over the time it did not wait; one worker's rate is images
    over its busy time. Grows at once when starved; shrinks one at a time when the consumer
    never waits and fewer workers would still cover it.
    """
    if window.images == 0 or window.busy_seconds <= 0:
        return Decision(window.workers, "not enough measurements yet")
    per_worker = window.images / window.busy_seconds
    consumer_seconds = max(window.seconds - window.wait_seconds, 1e-9)
    consumer_rate = window.images / consumer_seconds
    needed = min(max_workers, max(1, math.ceil(consumer_rate * HEADROOM / per_worker)))
    wait_share = window.wait_seconds / max(window.seconds, 1e-9)
    facts = (
        f"consumer takes {consumer_rate:,.0f} img/s, one worker decodes {per_worker:,.0f} img/s, "
        f"consumer waited {wait_share:.0%} of the time"
    )
    if needed > window.workers and wait_share > WAIT_SHARE_TO_GROW:
        return Decision(needed, f"grow to {needed}: {facts}")
    if needed < window.workers and wait_share <= WAIT_SHARE_TO_GROW:
        return Decision(window.workers - 1, f"shrink to {window.workers - 1}: {facts}")
    starved = (" (the maximum, still waiting: preprocess or decode on the GPU)"
               if wait_share > WAIT_SHARE_TO_GROW else "")
    return Decision(window.workers, f"keep {window.workers}{starved}: {facts}")


class WindowMeter:
    """Delivered images, consumer wait and worker busy time since the window began, on `clock`."""

    def __init__(self, clock: Callable[[], float] = time.perf_counter) -> None:
        self._clock = clock
        self.reset()

    def reset(self) -> None:
        self._start = self._clock()
        self._images = 0
        self._wait = self._busy = 0.0

    def add(self, images: int, wait: float, busy: float) -> None:
        self._images += images
        self._wait += wait
        self._busy += busy

    def elapsed(self) -> float:
        return self._clock() - self._start

    def close(self, workers: int) -> Window:
        """The finished window; a new one begins."""
        window = Window(self._images, self.elapsed(), self._wait, self._busy, workers)
        self.reset()
        return window
