"""The per-batch RNG key every engine and sample transform draws from."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class BatchKey:
    """The per-batch RNG key. Every engine draws a batch's crop boxes and flips, sample by sample
    in batch order, from `rng()`: the same (seed, epoch, rank, batch) gives the same pictures
    whatever the engine, its worker count, or where an epoch was resumed."""

    seed: int
    epoch: int
    rank: int
    batch_no: int

    def rng(self) -> np.random.Generator:
        """A fresh generator for this batch."""
        return np.random.default_rng((self.seed, self.epoch, self.rank, self.batch_no))
