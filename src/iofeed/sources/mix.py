"""`iofeed.Mix`: weighted sources read as one, and the epoch order of a mixture — a pure function of
(seed, epoch): each source's share of the epoch, taken from the source's endless stream of passes."""
from __future__ import annotations

import math
import numbers
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..errors import OptionError
from .remote.urls import is_url

CLASSES = ("name", "offset")  # how sources' class lists combine: merged by name, or one after another
_TAG = 0x6D6978  # "mix": keeps a mixture's seeds apart from the other orders' [seed, epoch]


@dataclass(frozen=True)
class Mix:
    """Sources read as one mixture, each weighted (relative weights; any source `iofeed.loader`
    reads). `epoch_samples`: samples per epoch (default: every source once at its natural size).
    `classes`: "name" merges the sources' classes by name, "offset" keeps them apart (source 2's
    classes after source 1's). Validated here, before anything is opened."""

    weights: Mapping[str, float]
    epoch_samples: int | None = None
    classes: str = "name"

    def __post_init__(self) -> None:
        if not isinstance(self.weights, Mapping) or not self.weights:
            raise OptionError(f"Mix takes a dict of source -> weight, got {self.weights!r}")
        names = [_name(source) for source in self.weights]
        seen: dict[str, str] = {}
        for name in names:  # spelled twice ("a.iof", "./a.iof/"); a symlink is a deliberate second name
            key = name.rstrip("/") if is_url(name) else os.path.normpath(name)
            if key in seen:
                raise OptionError(f"Mix lists {name!r} twice: give each source once, with its total weight")
            seen[key] = name
        weights: dict[str, float] = {}
        for name, weight in zip(names, self.weights.values()):
            if isinstance(weight, bool) or not isinstance(weight, numbers.Real) or not math.isfinite(weight) \
                    or weight <= 0:
                raise OptionError(f"Mix weight of {name!r} must be a positive finite number, got {weight!r}")
            weights[name] = float(weight)
        object.__setattr__(self, "weights", _Weights(weights))
        if self.epoch_samples is not None and (isinstance(self.epoch_samples, bool) or not isinstance(
                self.epoch_samples, numbers.Integral) or self.epoch_samples < 1):
            raise OptionError(f"Mix epoch_samples must be an int >= 1 (or None: every source once), "
                              f"got {self.epoch_samples!r}")
        if self.classes not in CLASSES:
            raise OptionError(f"Mix classes={self.classes!r} is not one of {', '.join(CLASSES)}")

    @property
    def names(self) -> list[str]:
        """The sources, in the order given."""
        return list(self.weights)

    def __str__(self) -> str:
        shares = ", ".join(f"{name!r}: {weight:g}" for name, weight in self.weights.items())
        return f"Mix({{{shares}}}, epoch_samples={self.epoch_samples}, classes={self.classes!r})"

    __repr__ = __str__

    def __hash__(self) -> int:
        return hash((tuple(self.weights.items()), self.epoch_samples, self.classes))


class _Weights(dict[str, float]):
    """A Mix's weights: a dict that refuses changes (the Mix is frozen), and pickles as one."""

    def _frozen(self, *args: object, **kwargs: object) -> None:
        raise TypeError("a Mix is frozen: make a new iofeed.Mix with the weights you want")

    __setitem__ = __delitem__ = __ior__ = clear = pop = popitem = setdefault = update = _frozen  # type: ignore

    def __reduce__(self) -> tuple[type[_Weights], tuple[dict[str, float]]]:
        return _Weights, (dict(self),)


def _name(source: object) -> str:
    if isinstance(source, Path):
        return str(source)
    if not isinstance(source, str) or not source:
        raise OptionError(f"Mix sources are paths or URLs (str), got {source!r}")
    return source


def shares(weights: list[float], total: int) -> list[int]:
    """Samples per source of an epoch of `total`: each weight's exact share rounded by largest
    remainder (ties to the earlier source), so every count is within one of `w / sum(w) * total`
    and they add up to `total`."""
    exact = [w / sum(weights) * total for w in weights]
    counts = [math.floor(x) for x in exact]
    by_remainder = sorted(range(len(weights)), key=lambda s: (-(exact[s] - counts[s]), s))
    for s in by_remainder[: total - sum(counts)]:
        counts[s] += 1
    return counts


@dataclass(frozen=True, eq=False)
class MixPlan:
    """The train order of a mixture: source s (its samples at `bases[s]` of the concatenated table,
    `sizes[s]` of them) gives `counts[s]` samples per epoch. A source with `shards[s]` (each of its
    samples' shard) passes through its samples block-wise (a streamed source: `block_shards`
    shards live at a time, as `shuffle="block"`), the others by a permutation of all of them."""

    sizes: tuple[int, ...]
    counts: tuple[int, ...]
    shards: tuple[np.ndarray | None, ...] = ()  # per source: block-wise passes over these shards (None: global)
    block_shards: int = 8

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

    def picks(self, seed: int, epoch: int, s: int) -> np.ndarray:
        """Source s's samples of `epoch` (its own indices), in stream order. Its stream is its
        passes one after another, pass p a permutation seeded by (seed, s, p): epoch e takes
        positions [e * count, (e + 1) * count). A source smaller than its share repeats, never within
        a pass; a larger one continues where the last epoch stopped."""
        size, count = self.sizes[s], self.counts[s]
        start, stop = epoch * count, (epoch + 1) * count
        out = []
        for p in range(start // size, -(-stop // size)):
            permutation = self._pass(np.random.default_rng([seed, _TAG, s, p]), s)
            lo, hi = max(start - p * size, 0), min(stop - p * size, size)
            out.append(permutation[lo:hi])
        return np.concatenate(out).astype(np.int64) if out else np.empty(0, np.int64)

    def _pass(self, rng: np.random.Generator, s: int) -> np.ndarray:
        """One pass over source s: a permutation of all its samples, or for a block-wise source its
        shards in a random order cut into blocks of `block_shards`, samples shuffled within each."""
        shard_of = self._shards(s)
        if shard_of is None:
            return rng.permutation(self.sizes[s])
        position = np.empty(int(shard_of.max()) + 1, np.int64)
        position[rng.permutation(len(position))] = np.arange(len(position))
        return np.lexsort((rng.random(self.sizes[s]), position[shard_of] // self.block_shards))

    def order(self, seed: int, epoch: int) -> np.ndarray:
        """The epoch's global order (indices into the concatenated table): the sources' slots in a
        seeded random sequence, each source's picks in its stream order, so that each source's
        samples come in the global order as its stream has them (every one once before any twice)."""
        slots = np.repeat(np.arange(len(self.sizes)), self.counts)
        slots = np.random.default_rng([seed, _TAG, epoch]).permutation(slots)
        out = np.empty(len(slots), np.int64)
        for s, base in enumerate(self.bases):
            out[slots == s] = self.picks(seed, epoch, s) + base
        return out
