"""The loader's grouped settings as small frozen objects — `Order`, `Resources`, `Cache`, `Skips` —
each checked when made (a one-line OptionError naming the field) and printed with only what
differs from its default. Why these four: docs/decisions/0072-loader-option-objects.md."""
from __future__ import annotations

import dataclasses
import difflib
import numbers
import os
from collections.abc import Iterable
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from ..errors import OptionError
from ..sources.order import CHOICES, PADS
from .checks import flag, integer, one_of, short_repr

if TYPE_CHECKING:
    from typing_extensions import Self

ON_ERROR = ("skip", "raise")
DEFAULT_MAX_SKIPPED = 0.05


def check_max_skipped(value: object) -> float | None:
    """`max_skipped` as a float in 0..1, or None; OptionError otherwise."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or not 0 <= float(value) <= 1:
        raise OptionError(f"max_skipped must be a fraction of the epoch's samples between 0 and 1 (0: any skip "
                          f"raises), or None for no bound, got {value!r}")
    return float(value)


class OptionGroup:
    """What the four objects share: the short repr, the integer check naming `Class.field`, and
    which fields the caller passed (`passed`), whatever their value."""

    passed: frozenset[str]

    def __new__(cls, *args: Any, **kwargs: Any) -> Self:
        # Recorded here, before the dataclass __init__: `Order(seed=0)` and `Order()` are equal, but
        # only the first set the seed, and a flat `seed=5` beside it must not silently win.
        self = super().__new__(cls)
        fields = dataclasses.fields(cls)  # type: ignore[arg-type]  # every subclass is a dataclass
        passed = {**dict(zip((f.name for f in fields), args)), **kwargs}
        defaults = {f.name: f.default for f in fields}
        object.__setattr__(self, "passed", frozenset(  # None where None is the default means "not set"
            name for name, value in passed.items() if not (value is None and defaults.get(name) is None)))
        return self

    def __repr__(self) -> str:
        return short_repr(self)

    def _int(self, name: str, minimum: int, optional: bool = False) -> None:
        """Field `name` checked as an int >= `minimum` (None allowed when `optional`), kept as int."""
        value = integer(f"{type(self).__name__}.{name}", getattr(self, name), minimum, optional)
        object.__setattr__(self, name, value)


@dataclass(frozen=True, repr=False)
class Order(OptionGroup):
    """The epoch order: which samples each batch holds, a function of (seed, epoch, rank, world_size).

    shuffle: "global" (a permutation of all samples; the default for the train split of a local
        dataset or folder), "block" (the default for a streamed train split: shards in a shuffled
        order, samples shuffled within blocks of `block_shards` shards, so that only two blocks
        are live at a time) or "none" (the default for other splits); True and False (as torch's
        DataLoader takes them) mean that default of the train split, and "none". A Mix's train
        split interleaves its sources by its own seeded order: there, "global" or "block" says how
        each source passes through its samples (the default: "block" for a streamed one).
    seed: seed of the shuffle and of the augmentation (an int >= 0): the order and the crops are a
        function of (seed, epoch, rank, batch), whatever the engine or workers.
    drop_last: drop each rank's last incomplete batch. Default (None): True for `split="train"`.
    block_shards: shards per block of `shuffle="block"` (an int >= 1).
    pad: how an epoch's last round is filled when not `drop_last`: "ranks" (the default; every rank
        gets the same number of batches of the same shapes, as DistributedSampler gives, by
        repeating up to world_size - 1 samples: `loader.last_valid` marks them), "batches" (every
        batch full, the last padded with repeats that `last_valid` marks: no short last batch for
        a per-batch mean) or "none" (each sample exactly once: ranks may end with one batch
        fewer or a shorter last batch, so only for metrics summed locally and reduced once after
        the pass; refused under several JAX processes). docs/distributed.md says which to use.
    """

    shuffle: str | bool | None = None
    seed: int = 0
    drop_last: bool | None = None
    block_shards: int = 8
    pad: str = "ranks"

    def __post_init__(self) -> None:
        if self.shuffle is not None and not isinstance(self.shuffle, bool):  # True/False as DataLoader takes them
            one_of("Order.shuffle", self.shuffle, CHOICES)
        self._int("seed", 0)
        flag("Order.drop_last", self.drop_last, optional=True)
        self._int("block_shards", 1)
        one_of("Order.pad", self.pad, PADS)


@dataclass(frozen=True, repr=False)
class Resources(OptionGroup):
    """What the engine may use on this machine.

    workers: worker processes (workers engine) or threads (DALI), an int >= 1. None autotunes the
        workers engine: one worker at first, then the count that keeps the consumer from waiting,
        up to the usable cores — CPU affinity and cgroup quota, shared among the node's local
        ranks (`LOCAL_WORLD_SIZE`); see `stats.settings["decisions"]` and `["cores_because"]`;
        for DALI, the usable cores.
    prefetch: batches made ahead (an int >= 1). Default: two per worker, at least 8 (workers
        engine, within `memory_budget`); 2 for DALI.
    memory_budget: bytes of memory for the workers engine's batch slots (an int >= 1; anonymous
        shared memory, not limited by /dev/shm). Default: a quarter of the memory this process
        may use (available RAM, capped by the cgroup limit), shared among local ranks; see
        `stats.settings["memory_because"]`.
    """

    workers: int | None = None
    prefetch: int | None = None
    memory_budget: int | None = None

    def __post_init__(self) -> None:
        for name in ("workers", "prefetch", "memory_budget"):
            self._int(name, 1, optional=True)


@dataclass(frozen=True, repr=False)
class Cache(OptionGroup):
    """The node-local cache of a dataset streamed from object storage (ignored for local paths).

    dir: the cache's folder, shared by every rank of the node (default `IOFEED_CACHE`, else
        ~/.cache/iofeed): a new or empty folder, or one iofeed marked as its cache (a non-empty
        folder without the mark is refused).
    limit: bytes the cache may hold (an int >= 1; default: what it holds plus the free disk less
        max(2 GiB, 5% of the free disk)); it must hold the shards the order keeps live.
    """

    dir: str | os.PathLike[str] | None = None
    limit: int | None = None

    def __post_init__(self) -> None:
        if not (self.dir is None or isinstance(self.dir, (str, os.PathLike))):
            raise OptionError(f"Cache.dir must be a folder path or None, got {self.dir!r} ({type(self.dir).__name__})")
        self._int("limit", 1, optional=True)


@dataclass(frozen=True, repr=False)
class Skips(OptionGroup):
    """What happens to a sample that cannot be read, and how many may be skipped.

    on_error: "skip" a sample that cannot be read (counted in `stats.skipped`, with the first few
        paths in `stats.skipped_examples`), or "raise" a `SampleError` naming it. A skipped
        sample's place goes to a spare sample (the rank's later ones, counted in
        `stats.refilled`), so every rank delivers `len(loader)` full batches (a batch that runs
        out of spares stays short, or is not delivered: `stats.skipped_batches`); `last_valid`
        marks the spare. An order that deals each sample once (`Order(pad="none")`) takes no
        spares: the batch stays short.
    max_skipped: the share of an epoch's samples (on this rank) that may be skipped, a fraction in
        0..1 (default 0.05; 0: any skip raises). Past it, or when an epoch delivers no batch, a
        `SampleError` gives the counts by reason and the first files; for a folder, files its
        scan rejected inside class folders are held to it when the loader is made. None: skips
        are counted, never raised.
    """

    on_error: str = "skip"
    max_skipped: float | None = DEFAULT_MAX_SKIPPED

    def __post_init__(self) -> None:
        one_of("Skips.on_error", self.on_error, ON_ERROR)
        object.__setattr__(self, "max_skipped", check_max_skipped(self.max_skipped))


# loader()'s flat spelling of each grouped field -> (its LoaderOptions attribute, the field)
FLAT: dict[str, tuple[str, str]] = {
    "shuffle": ("order", "shuffle"), "seed": ("order", "seed"), "drop_last": ("order", "drop_last"),
    "block_shards": ("order", "block_shards"),
    "workers": ("resources", "workers"), "prefetch": ("resources", "prefetch"),
    "memory_budget": ("resources", "memory_budget"),
    "cache_dir": ("cache", "dir"), "cache_limit": ("cache", "limit"),
    "on_error": ("skips", "on_error"), "max_skipped": ("skips", "max_skipped"),
}
GROUPS: dict[str, type[OptionGroup]] = {"order": Order, "resources": Resources, "cache": Cache, "skips": Skips}


def checked_group(name: str, value: Any) -> Any:
    """`loader(name=value)` for one of the four objects: None gives the default one, anything
    but an object of its class is refused naming the class."""
    kind = GROUPS[name]
    if value is None:
        return kind()
    if not isinstance(value, kind):
        raise OptionError(f"{name}= takes an iofeed.{kind.__name__}(...), got {value!r} ({type(value).__name__})")
    return value


def with_flat(groups: dict[str, Any], flat: dict[str, Any], known: Iterable[str]) -> dict[str, Any]:
    """The four objects (by `GROUPS` name) with loader()'s flat spellings in `flat` applied
    (`seed=3` is `order=Order(seed=3)`). A flat value given with its object's field passed to
    another value is refused naming both spellings (`Order(seed=0), seed=5` too: a field counts
    as set when passed, even at its default; one passed as None where None is the default does not);
    a keyword that is no option is refused naming the close matches among `known` and `FLAT`."""
    fields: dict[str, dict[str, Any]] = {name: {} for name in groups}
    for key, value in flat.items():
        if key not in FLAT:
            close = difflib.get_close_matches(key, [*known, *FLAT], n=3)
            hint = f"did you mean {' or '.join(close)}?" if close else "see help(iofeed.loader) for the options"
            raise OptionError(f"loader() got an unknown keyword {key}={value!r}: {hint}")
        group, name = FLAT[key]
        fields[group][name] = value
    merged = {}
    for group, given in groups.items():
        merged[group] = replace(given, **fields[group]) if fields[group] else given
        for name in fields[group]:
            before = getattr(given, name)
            if name in given.passed and getattr(merged[group], name) != before:
                spelling = next(k for k, target in FLAT.items() if target == (group, name))
                raise OptionError(f"{spelling}={fields[group][name]!r} and {group}={given!r} both set "
                                  f"{type(given).__name__}.{name}, to different values ({fields[group][name]!r} and "
                                  f"{before!r}): pass one of them")
    return merged
