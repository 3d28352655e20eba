"""Epoch order: a pure function of (seed, epoch, rank, world_size), whatever the worker count."""
from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from .errors import OptionError


def _unshuffled(spec: OrderSpec, epoch: int) -> np.ndarray:
    return np.arange(spec.samples)


def _global(spec: OrderSpec, epoch: int) -> np.ndarray:
    return np.random.default_rng([spec.seed, epoch]).permutation(spec.samples)


def _block(spec: OrderSpec, epoch: int) -> np.ndarray:
    """Shards in a shuffled order, cut into blocks of `block_shards`; samples shuffled within each
    block. Only a block's shards (and the next block's) are live at a time."""
    rng = np.random.default_rng([spec.seed, epoch])
    shards = int(spec.shard_of.max()) + 1
    position = np.empty(shards, np.int64)
    position[rng.permutation(shards)] = np.arange(shards)
    block = position[spec.shard_of] // spec.block_shards
    return np.lexsort((rng.random(spec.samples), block))


@dataclass(frozen=True)
class Shuffle:
    """One epoch order: the permutation of all samples, and which end pads a short last round."""

    order: Callable[[OrderSpec, int], np.ndarray]
    pad_from_end: bool  # pad with the epoch's last samples (still cached), not its first


SHUFFLES: dict[str, Shuffle] = {
    "none": Shuffle(_unshuffled, False),
    "global": Shuffle(_global, False),
    "block": Shuffle(_block, True),
}


@dataclass(frozen=True)
class OrderSpec:
    """Everything the order of an epoch depends on, apart from the epoch number.

    `shuffle` is "global" (a permutation of all samples), "block" (see `_block`: for streamed
    datasets; needs `shard_of`, each sample's shard) or "none"; True and False mean
    "global" and "none".
    """

    samples: int
    batch_size: int
    shuffle: str | bool
    drop_last: bool
    seed: int = 0
    rank: int = 0
    world_size: int = 1
    block_shards: int = 8
    shard_of: np.ndarray | None = field(default=None, compare=False, repr=False)

    def __post_init__(self) -> None:
        if isinstance(self.shuffle, bool):
            object.__setattr__(self, "shuffle", "global" if self.shuffle else "none")
        if self.shuffle not in SHUFFLES:
            raise OptionError(f"shuffle={self.shuffle!r} is not one of {', '.join(SHUFFLES)}")
        if self.batch_size < 1:
            raise OptionError(f"batch_size must be >= 1, got {self.batch_size}")
        if self.world_size < 1 or not 0 <= self.rank < self.world_size:
            raise OptionError(f"rank must be in [0, world_size), got rank={self.rank}, world_size={self.world_size}")
        if self.samples < self.world_size:
            raise OptionError(f"{self.samples} samples cannot be shared by {self.world_size} ranks")
        if self.shuffle == "block" and (self.shard_of is None or len(self.shard_of) != self.samples):
            raise OptionError("shuffle='block' needs the shard of every sample")
        if self.block_shards < 1:
            raise OptionError(f"block_shards must be >= 1, got {self.block_shards}")

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

        The epoch's order of all samples is padded by repeating samples (from its start, or
        for a block order from its end), or trimmed, to `per_rank * world_size`, then dealt
        out rank by rank: ranks are disjoint apart from the padding, their union covers every
        sample, and they move through the order together (one block live per node).
        """
        shuffle = SHUFFLES[self.shuffle]
        order = shuffle.order(self, epoch)
        total = self.per_rank * self.world_size
        if total > len(order) and shuffle.pad_from_end:
            order = np.concatenate([order, order[len(order) - (total - len(order)):]])
        order = np.resize(order, total)  # wraps around to pad, or trims
        return order[self.rank :: self.world_size]

    def batches(self, epoch: int) -> list[np.ndarray]:
        """This rank's batches of sample indices for `epoch`."""
        indices = self.rank_indices(epoch)[: len(self) * self.batch_size]
        return [indices[i : i + self.batch_size] for i in range(0, len(indices), self.batch_size)]
