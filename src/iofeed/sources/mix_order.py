"""A mixture's epoch order, computed a block at a time: which source each position of the epoch
holds (a seeded random arrangement of the sources' exact shares) and which of its samples (the
source's stream of passes). Any stretch of an epoch of billions costs the stretch, not the epoch."""
from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Generic, TypeVar, cast

import numpy as np

_TAG = 0x6D6978  # "mix": keeps a mixture's seeds apart from the other orders' [seed, epoch]
LEAF = 1 << 16  # positions per block of the arrangement: what one step of the order materialises
HYPERGEOMETRIC_MAX = 10**9 - 1  # numpy's multivariate hypergeometric takes totals below 10**9
_NODE, _LEAF = 1, 2  # seed keys of a split of the arrangement and of a block's own shuffle

_K = TypeVar("_K")
_V = TypeVar("_V")


class _Cache(Generic[_K, _V]):
    """A few recent results by key, safe to share between the threads that ask for batches (the
    consumer's, a tf.data or download thread); pickled empty."""

    def __init__(self, size: int) -> None:
        self._size, self._items, self._lock = size, OrderedDict[_K, _V](), threading.Lock()

    def get(self, key: _K, make: Callable[[], _V]) -> _V:
        with self._lock:
            if key in self._items:
                self._items.move_to_end(key)
                return self._items[key]
        value = make()  # outside the lock: a second thread may make it too, never a wrong one
        with self._lock:
            self._items[key] = value
            while len(self._items) > self._size:
                self._items.popitem(last=False)
        return value

    def __reduce__(self) -> tuple[type[_Cache[_K, _V]], tuple[int]]:
        return _Cache, (self._size,)


def split_counts(counts: np.ndarray, left: int, rng: np.random.Generator) -> np.ndarray:
    """Of `counts[s]` slots of each source spread at random over `counts.sum()` positions, how many
    fall in the first `left`: a multivariate hypergeometric draw (a normal approximation of each
    conditional draw, kept within what stays feasible, for totals numpy cannot draw from)."""
    total = int(counts.sum())
    if total <= HYPERGEOMETRIC_MAX:
        return rng.multivariate_hypergeometric(counts, left, method="marginals").astype(np.int64)
    out, rest, want = np.zeros(len(counts), np.int64), total, left
    for s, count in enumerate(counts.tolist()):
        if s == len(counts) - 1 or not want:
            out[s] = want
            break
        p, spread = count / rest, (rest - want) / max(rest - 1, 1)
        draw = round(want * p + (want * p * (1 - p) * spread) ** 0.5 * rng.standard_normal())
        out[s] = min(max(draw, want - (rest - count), 0), count, want)
        rest, want = rest - count, want - int(out[s])
    return out


@dataclass(frozen=True, eq=False)
class MixPlan:
    """The train order of a mixture: source s (`sizes[s]` samples at `bases[s]` of the concatenated
    table) gives `counts[s]` samples per epoch. A source with `shards[s]` (each of its samples'
    shard) passes through its samples block-wise (`block_shards` shards at a time, as
    `shuffle="block"`), the others by a permutation of all of them.

    The arrangement of the epoch's sources is a uniformly random arrangement of the shares, drawn
    top-down: the epoch's positions are halved again and again down to blocks of `LEAF`, each split
    drawing how many of each source's slots fall in its first half (seeded by the epoch and the
    split), each block shuffled by its own seed. So one block and a path of `log2(blocks)` splits
    give any stretch of the epoch, and how many of each source's samples precede any position."""

    sizes: tuple[int, ...]
    counts: tuple[int, ...]
    shards: tuple[np.ndarray | None, ...] = ()  # per source: block-wise passes over these shards (None: global)
    block_shards: int = 8
    # the caches of blocks and passes, made by __post_init__
    _blocks: _Cache[tuple[int, int, int], np.ndarray] = field(init=False, repr=False, compare=False)
    _passes: list[_Cache[tuple[int, int], np.ndarray]] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_blocks", _Cache(8))  # (seed, epoch, block) -> its table indices
        # per source, its two latest passes (seed, pass) -> permutation: a large source's are large
        object.__setattr__(self, "_passes", [_Cache(2) for _ in self.sizes])

    @property
    def kinds(self) -> list[str]:
        """Each source's pass order: "block" or "global"."""
        return ["block" if self._shards(s) is not None else "global" for s in range(len(self.sizes))]

    def _shards(self, s: int) -> np.ndarray | None:
        return self.shards[s] if s < len(self.shards) else None

    @property
    def bases(self) -> np.ndarray:
        return np.concatenate([[0], np.cumsum(self.sizes)[:-1]]).astype(np.int64)

    @property
    def epoch_samples(self) -> int:
        return sum(self.counts)

    # ---- each source's stream of passes

    def _pass(self, seed: int, s: int, p: int) -> np.ndarray:
        """Pass p over source s: a permutation of all its samples, or for a block-wise source its
        shards in a random order cut into blocks of `block_shards`, samples shuffled within each."""
        def make() -> np.ndarray:
            rng = np.random.default_rng([seed, _TAG, s, p])
            shard_of = self._shards(s)
            if shard_of is None:
                return rng.permutation(self.sizes[s])
            position = np.empty(int(shard_of.max()) + 1, np.int64)
            position[rng.permutation(len(position))] = np.arange(len(position))
            return np.lexsort((rng.random(self.sizes[s]), position[shard_of] // self.block_shards))
        return self._passes[s].get((seed, p), make)

    def stream(self, seed: int, s: int, start: int, stop: int) -> np.ndarray:
        """Positions [start, stop) of source s's stream (its own indices): its passes one after
        another, pass p a permutation seeded by (seed, s, p)."""
        size, out = self.sizes[s], []
        for p in range(start // size, -(-stop // size)):
            lo, hi = max(start - p * size, 0), min(stop - p * size, size)
            out.append(self._pass(seed, s, p)[lo:hi])
        return np.concatenate(out).astype(np.int64) if out else np.empty(0, np.int64)

    def picks(self, seed: int, epoch: int, s: int) -> np.ndarray:
        """Source s's samples of `epoch` in stream order: positions [e * count, (e + 1) * count) of
        its stream. A source smaller than its share repeats, never within a pass; a larger one
        continues where the last epoch stopped."""
        return self.stream(seed, s, epoch * self.counts[s], (epoch + 1) * self.counts[s])

    # ---- the arrangement of the sources over an epoch

    @property
    def blocks(self) -> int:
        return -(-self.epoch_samples // LEAF)

    def _descend(self, seed: int, epoch: int, block: int) -> tuple[np.ndarray, np.ndarray]:
        """(each source's slots in `block`, each source's slots before it)."""
        counts, before = np.array(self.counts, np.int64), np.zeros(len(self.counts), np.int64)
        lo, hi = 0, self.blocks
        while hi - lo > 1:
            mid = (lo + hi) // 2
            left = split_counts(counts, (mid - lo) * LEAF, np.random.default_rng([seed, _TAG, epoch, _NODE, lo, hi]))
            if block < mid:
                counts, hi = left, mid
            else:
                counts, before, lo = counts - left, before + left, mid
        return counts, before

    def _block(self, seed: int, epoch: int, block: int) -> np.ndarray:
        """The table indices at the positions of `block` of `epoch`."""
        def make() -> np.ndarray:
            counts, before = self._descend(seed, epoch, block)
            rng = np.random.default_rng([seed, _TAG, epoch, _LEAF, block])
            slots = rng.permutation(np.repeat(np.arange(len(counts)), counts))
            where = np.argsort(slots, kind="stable")  # each source's positions in the block, in order
            out, ends, bases = np.empty(len(slots), np.int64), np.cumsum(counts), self.bases
            for s in np.flatnonzero(counts).tolist():
                first = epoch * self.counts[s] + int(before[s])  # its stream position at the block's start
                mine = where[ends[s] - counts[s]:ends[s]]
                out[mine] = self.stream(seed, s, first, first + int(counts[s])) + bases[s]
            return out
        return self._blocks.get((seed, epoch, block), make)

    def take(self, seed: int, epoch: int, start: int, stop: int) -> np.ndarray:
        """Positions [start, stop) of `epoch`'s global order (indices into the concatenated table)."""
        start, stop = max(start, 0), min(stop, self.epoch_samples)
        parts = [self._block(seed, epoch, b)[max(start - b * LEAF, 0):stop - b * LEAF]
                 for b in range(start // LEAF, -(-stop // LEAF))] if start < stop else []
        return np.concatenate(parts) if parts else np.empty(0, np.int64)

    def before(self, seed: int, epoch: int, position: int) -> list[int]:
        """Each source's samples among the first `position` of `epoch`'s global order."""
        if position >= self.epoch_samples:
            return list(self.counts)
        block, into = divmod(position, LEAF)
        _, before = self._descend(seed, epoch, block)
        head = self._block(seed, epoch, block)[:into]
        sources = np.searchsorted(np.append(self.bases, np.iinfo(np.int64).max), head, side="right") - 1
        return cast("list[int]", (before + np.bincount(sources, minlength=len(self.counts))).tolist())  # int64s

    def order(self, seed: int, epoch: int) -> np.ndarray:
        """`epoch`'s whole global order (a small epoch's: tests, inspection)."""
        return self.take(seed, epoch, 0, self.epoch_samples)

    def epoch_order(self, seed: int, epoch: int) -> MixEpoch:
        """`epoch`'s global order, a stretch at a time (see `MixEpoch`)."""
        return MixEpoch(self, seed, epoch)


@dataclass(frozen=True)
class MixEpoch:
    """One epoch of a mixture's global order, as `OrderSpec` reads an order: its length, and any
    stretch of it by slicing (`order[a:b]`, a numpy array), made when asked."""

    plan: MixPlan
    seed: int
    epoch: int

    def __len__(self) -> int:
        return self.plan.epoch_samples

    def __getitem__(self, where: slice) -> np.ndarray:
        if not isinstance(where, slice):
            raise TypeError("a mixture's epoch order is read by stretches: order[a:b]")
        start, stop, step = where.indices(len(self))
        if step < 0:
            raise TypeError("a mixture's epoch order is read forwards")
        return self.plan.take(self.seed, self.epoch, start, stop)[::step]

    def before(self, position: int) -> list[int]:
        """Each source's samples among the first `position` of the epoch."""
        return self.plan.before(self.seed, self.epoch, position)
