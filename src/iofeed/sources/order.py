"""Epoch order: one global sample order per (seed, epoch), dealt out to ranks by (rank, world_size)
from any point of it, whatever the worker count."""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, cast

import numpy as np

from ..errors import OptionError
from .dealing import Dealing, EpochBatches, _Once


@dataclass(frozen=True)
class _InOrder:
    """0, 1, ..., samples - 1, made a stretch at a time (`order[a:b]`) as the ranks ask for it."""

    samples: int

    def __len__(self) -> int:
        return self.samples

    def __getitem__(self, where: slice) -> np.ndarray:
        return np.arange(*where.indices(self.samples), dtype=np.int64)


def _unshuffled(spec: OrderSpec, epoch: int) -> _InOrder:
    return _InOrder(spec.samples)


def _global(spec: OrderSpec, epoch: int) -> np.ndarray:
    return np.random.default_rng([spec.seed, epoch]).permutation(spec.samples)


def _block(spec: OrderSpec, epoch: int) -> np.ndarray:
    """Shards in a shuffled order, cut into blocks of `block_shards`; samples shuffled within each
    block. Only a block's shards (and the next block's) are live at a time."""
    assert spec.shard_of is not None  # OrderSpec refuses "block" without it
    rng = np.random.default_rng([spec.seed, epoch])
    shards = int(spec.shard_of.max()) + 1
    position = np.empty(shards, np.int64)
    position[rng.permutation(shards)] = np.arange(shards)
    block = position[spec.shard_of] // spec.block_shards
    return np.lexsort((rng.random(spec.samples), block))


def _mixed(spec: OrderSpec, epoch: int) -> Any:
    return spec.plan.epoch_order(spec.seed, epoch)  # a mixture's epoch, a stretch at a time: `mix_order.MixPlan`


@dataclass(frozen=True)
class Shuffle:
    """One epoch order: the permutation of all samples (an array, or an object that gives any
    stretch of it by slicing), and which end pads a short last round."""

    order: Callable[[OrderSpec, int], Any]
    pad_from_end: bool  # pad with the epoch's last samples (still cached), not its first


SHUFFLES: dict[str, Shuffle] = {
    "none": Shuffle(_unshuffled, False),
    "global": Shuffle(_global, False),
    "block": Shuffle(_block, True),
    "mix": Shuffle(_mixed, False),  # made by a Mix for its train split, never asked for by name
}
CHOICES = ("none", "global", "block")  # the shuffles a user names (`loader(shuffle=)`)

# How an epoch's last round (fewer than batch_size * world_size samples) is filled, when not drop_last:
# "ranks": to equal shares (every rank the same batches of the same shapes, as DistributedSampler gives);
# "batches": to full batches; "none": not at all (each sample once, ranks may end unevenly).
PADS = ("ranks", "batches", "none")  # why "ranks" by default: docs/decisions/0076


@dataclass(frozen=True)
class OrderSpec:
    """Everything the order of an epoch depends on, apart from the epoch number (and, after a
    resume, how much of it is done). The global order depends on `samples`, `seed`, `shuffle`,
    `block_shards` and `shard_of` only; `rank`, `world_size`, `batch_size` and `drop_last` say how
    it is dealt out.

    `shuffle` is "global" (a permutation of all samples), "block" (see `_block`: for streamed
    datasets; needs `shard_of`, each sample's shard), "mix" (a mixture's epoch: needs `plan`, a
    `mix_order.MixPlan`; made by a Mix, never named by a user; `samples` is its epoch length) or
    "none"; True and False mean "global" and "none".
    `pad` (one of `PADS`; True and False mean "ranks" and "none") says how the last round is
    filled when not `drop_last`: "ranks" pads it to equal shares, so that every rank steps the same
    number of times with batches of the same shapes; "batches" pads it to full batches; with
    "none" each sample is dealt exactly once and the first `samples % world_size` ranks hold one
    more. A padded last round is dealt in runs, rank 0's first, its padding at the end: batches
    gathered in rank order (as accelerate's `gather_for_metrics` does) hold the split, then the
    padding, so cutting them to the split's length scores each sample once.
    """

    samples: int
    batch_size: int
    shuffle: str | bool
    drop_last: bool
    seed: int = 0
    rank: int = 0
    world_size: int = 1
    block_shards: int = 8
    pad: str | bool = "ranks"
    shard_of: np.ndarray | None = field(default=None, compare=False, repr=False)
    plan: Any = field(default=None, compare=False, repr=False)

    def __post_init__(self) -> None:
        if isinstance(self.shuffle, bool):
            object.__setattr__(self, "shuffle", "global" if self.shuffle else "none")
        if self.shuffle not in CHOICES and (self.shuffle != "mix" or self.plan is None):
            raise OptionError(f"shuffle={self.shuffle!r} is not one of {', '.join(CHOICES)}")
        if isinstance(self.pad, bool):
            object.__setattr__(self, "pad", "ranks" if self.pad else "none")
        if self.pad not in PADS:
            raise OptionError(f"pad={self.pad!r} is not one of {', '.join(PADS)}")
        if self.batch_size < 1:
            raise OptionError(f"batch_size must be >= 1, got {self.batch_size}")
        if self.world_size < 1 or not 0 <= self.rank < self.world_size:
            raise OptionError(f"rank must be in [0, world_size), got rank={self.rank}, world_size={self.world_size}")
        if self.samples < self.world_size:
            raise OptionError(f"{self.samples} samples cannot be shared by {self.world_size} ranks")
        if self.shuffle == "block" and (self.shard_of is None or len(self.shard_of) != self.samples):
            raise OptionError("shuffle='block' needs the shard of every sample")
        if self.shuffle == "mix" and self.plan.epoch_samples != self.samples:
            raise OptionError(f"a mixture's order holds {self.plan.epoch_samples} samples, not {self.samples}")
        if self.block_shards < 1:
            raise OptionError(f"block_shards must be >= 1, got {self.block_shards}")

    def share(self, remaining: int) -> int:
        """Samples this rank takes of `remaining` samples of the global order (padded or trimmed so
        that all ranks are equal, unless `pad="none"`)."""
        if self.drop_last:
            return remaining // self.world_size
        if self.pad == "none":
            return len(range(self.rank, remaining, self.world_size))
        rounds, last = divmod(remaining, self.batch_size * self.world_size)  # ints: floats round past 2**53
        if not last:
            return rounds * self.batch_size
        return rounds * self.batch_size + (self.batch_size if self.pad == "batches" else -(-last // self.world_size))

    def own_rows(self, done: int = 0) -> int:
        """Of this rank's samples for the rest of an epoch whose first `done` samples are done, how
        many are its own: past them come the rows that pad its share (repeats of samples dealt
        already), none with `pad="none"` or `drop_last`."""
        remaining = max(self.samples - done, 0)
        if self.drop_last or self.pad == "none":
            return self.share(remaining)
        rounds, last = divmod(remaining, self.batch_size * self.world_size)
        run = self.share(remaining) - rounds * self.batch_size  # this rank's rows of the last round
        return rounds * self.batch_size + min(max(last - self.rank * run, 0), run)

    def own_samples(self, batches: EpochBatches, done: int = 0) -> EpochBatches:
        """Per entry of `batches(epoch, done, first)`, the samples that are the batch's own: all
        but the padding (`own_rows`)."""
        return batches.limited(self.own_rows(done))

    @property
    def per_rank(self) -> int:
        """Samples this rank sees in a whole epoch."""
        return self.share(self.samples)

    def batch_count(self, done: int = 0) -> int:
        """Batches on each rank for the rest of an epoch whose first `done` samples of the global
        order are done."""
        share = self.share(max(self.samples - done, 0))
        return share // self.batch_size if self.drop_last else -(-share // self.batch_size)

    def __len__(self) -> int:
        """Batches per epoch on each rank."""
        return self.batch_count(0)

    def rank_indices(self, epoch: int, done: int = 0) -> np.ndarray:
        """This rank's sample indices for `epoch`, in order, once the first `done` samples of the
        epoch's global order are done (by any world size and batch size).

        The global order of all samples (a function of the seed and epoch only) less its first
        `done` is dealt out rank by rank: sample i of what is left goes to rank i mod world_size,
        round after round of batch_size * world_size samples. A last round short of that is
        trimmed (`drop_last`), or padded (`pad`) by repeating samples (from the order's start, or
        for a block order from its end) and dealt in runs, rank 0's first, so that the padding is
        at its end (`pad="none"`: dealt as the others, unpadded). Ranks are disjoint apart from the
        padding, their union covers the rest of the epoch, and they move through the order
        together (one block live per node). So the first k batches of every rank are exactly the
        first k * batch_size * world_size samples of the global order: "done" is always a prefix.
        """
        rows = self._rows(done)
        whole = self._dealt(epoch, done, 0, rows, rows)
        return np.concatenate(list(whole)) if len(whole) else np.empty(0, np.int64)

    def _rows(self, done: int) -> int:
        """Rows this rank takes of the rest of an epoch whose first `done` samples are done."""
        return self.share(max(self.samples - done, 0))

    def _dealt(self, epoch: int, done: int, first: int, rows: int, batch_size: int) -> EpochBatches:
        """This rank's `rows` of `epoch` past `done`, in batches of `batch_size` numbered from `first`."""
        shuffle, done = SHUFFLES[cast(str, self.shuffle)], min(done, self.samples)  # __post_init__ names a bool
        remaining = self.samples - done
        if self.drop_last or self.pad == "none":  # round-robin to the end, nothing padded
            dealt, run, pad = self.share(remaining), 0, 0
        else:  # whole rounds round-robin, then the last round in runs with its padding at the end
            rounds, last = divmod(remaining, self.batch_size * self.world_size)
            dealt = rounds * self.batch_size
            run = self.share(remaining) - dealt
            pad = run * self.world_size - last
        dealing = Dealing(self.samples, done, self.rank, self.world_size, dealt, run, pad, shuffle.pad_from_end)
        count = -(-rows // batch_size) if rows else 0
        return EpochBatches(_Once(lambda: shuffle.order(self, epoch)), dealing, batch_size, first, rows,
                            range(first + count))

    def batches(self, epoch: int, done: int = 0, first: int = 0) -> EpochBatches:
        """This rank's batches of sample indices for `epoch`, numbered from `first`: entry k is
        batch k (its crops come from `BatchKey(..., k)`). After a resume (`done` samples of the
        global order done, `first` batches counted by the run that did them) the entries before
        `first` are empty: they were delivered before the resume. Each batch is made when asked
        (`dealing.EpochBatches`): an epoch of any length costs the batches in flight."""
        rows = min(self._rows(done), self.batch_count(done) * self.batch_size)
        return self._dealt(epoch, done, first, rows, self.batch_size)


def valid_rows(delivered: np.ndarray, own: np.ndarray) -> np.ndarray:
    """Per row of a delivered batch, whether it is one of the batch's `own` samples
    (`OrderSpec.own_samples`): a sample's first rows, as many as `own` holds it (a mixture's
    up-sampled source may plan it twice in one batch). False for padding (a repeat that evens the
    ranks' shares) and for a spare in a skipped sample's place (its own batch delivers it too)."""
    values, counts = np.unique(own, return_counts=True)
    left = dict(zip(values.tolist(), counts.tolist()))
    valid = np.zeros(len(delivered), bool)
    for row, index in enumerate(delivered.tolist()):
        if left.get(index, 0) > 0:
            left[index] -= 1
            valid[row] = True
    return valid
