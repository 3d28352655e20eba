"""The next epoch's first batches, sent to the workers while this epoch's last ones decode."""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from .task import Done


@dataclass
class NextEpochStart:
    """The next epoch's first batches, sent to the workers while this epoch's last ones decode, so
    that a new epoch (a new iterator: each Keras epoch) starts on decoded batches."""

    generation: int
    epoch: int
    rank: int
    sent: list[np.ndarray] = field(default_factory=list)  # its batches 0, 1, … sent so far
    slots: set[int] = field(default_factory=set)  # the slots they fill
    ready: dict[int, Done] = field(default_factory=dict)

    def matches(self, epoch: int, batches: list[np.ndarray], start: int, rank: int) -> bool:
        """Whether a pass of (epoch, batches from start, rank) begins with the batches sent."""
        return ((epoch, rank, start) == (self.epoch, self.rank, 0) and len(self.sent) <= len(batches)
                and all(np.array_equal(a, b) for a, b in zip(self.sent, batches)))
