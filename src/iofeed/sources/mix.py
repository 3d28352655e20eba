"""`iofeed.Mix`: weighted sources read as one, and each source's exact share of an epoch (the order
that interleaves them: `mix_order.MixPlan`)."""
from __future__ import annotations

import math
import numbers
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from ..errors import OptionError
from .mix_order import MixPlan
from .remote.urls import is_url

__all__ = ["CLASSES", "MAX_EPOCH_SAMPLES", "Mix", "MixPlan", "shares"]

CLASSES = ("name", "offset")  # how sources' class lists combine: merged by name, or one after another
MAX_EPOCH_SAMPLES = 2**62  # positions stay int64 (and len(loader) a C ssize_t) at any world and batch size


@dataclass(frozen=True)
class Mix:
    """Sources read as one mixture, each weighted (relative weights; any source `iofeed.loader`
    reads). `epoch_samples`: samples per epoch (default: as many as the sources hold together,
    shared out by the weights: each source gives its own size only when the weights are in
    proportion to the sizes). `classes`: "name" merges the sources' classes by name, "offset"
    keeps them apart (source 2's classes after source 1's). Validated here, before anything is opened."""

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
                self.epoch_samples, numbers.Integral) or not 1 <= self.epoch_samples <= MAX_EPOCH_SAMPLES):
            raise OptionError(f"Mix epoch_samples must be an int from 1 to 2**62 (or None: the sources' sizes added "
                              f"up), got {self.epoch_samples!r}")
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

    __setitem__ = __delitem__ = __ior__ = clear = pop = popitem = setdefault = update = _frozen  # type: ignore[assignment]  # one refusal for every mutator

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
