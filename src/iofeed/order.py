"""Epoch order: a pure function of (seed, epoch, rank, world_size), whatever the worker count."""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from .errors import OptionError


@dataclass(frozen=True)
class OrderSpec:
    """Everything the order of an epoch depends on, apart from the epoch number."""

    samples: int
    batch_size: int
    shuffle: bool
    drop_last: bool
    seed: int = 0
    rank: int = 0
    world_size: int = 1

    def __post_init__(self) -> None:
        if self.batch_size < 1:
            raise OptionError(f"batch_size must be >= 1, got {self.batch_size}")
        if self.world_size < 1 or not 0 <= self.rank < self.world_size:
            raise OptionError(f"rank must be in [0, world_size), got rank={self.rank}, world_size={self.world_size}")
        if self.samples < self.world_size:
            raise OptionError(f"{self.samples} samples cannot be shared by {self.world_size} ranks")

    @property
    def per_rank(self) -> int:
        """Samples each rank sees in an epoch (padded or trimmed so that all ranks are equal)."""
        if self.drop_last:
            return self.samples // self.world_size
        return math.ceil(self.samples / self.world_size)

    def __len__(self) -> int:
        """Batches per epoch on each rank."""
        if self.drop_last:
            return self.per_rank // self.batch_size
        return math.ceil(self.per_rank / self.batch_size)

    def rank_indices(self, epoch: int) -> np.ndarray:
        """This rank's sample indices for `epoch`, in order.

        A global permutation (or the identity) is padded by wrapping around, or trimmed, to
        `per_rank * world_size`, then dealt out rank by rank: ranks are disjoint apart from
        the padding, and their union covers every sample.
        """
        if self.shuffle:
            order = np.random.default_rng([self.seed, epoch]).permutation(self.samples)
        else:
            order = np.arange(self.samples)
        total = self.per_rank * self.world_size
        order = np.resize(order, total)  # wraps around to pad, or trims
        return order[self.rank :: self.world_size]

    def batches(self, epoch: int) -> list[np.ndarray]:
        """This rank's batches of sample indices for `epoch`."""
        indices = self.rank_indices(epoch)[: len(self) * self.batch_size]
        return [indices[i : i + self.batch_size] for i in range(0, len(indices), self.batch_size)]
