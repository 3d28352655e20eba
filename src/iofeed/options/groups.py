"""The loader's grouped settings as small frozen objects — `Placement`, `Output`, `Order`,
`Resources`, `Cache`, `Skips` — each checked when made (a one-line OptionError naming the field)
and printed with only what differs from its default. Each field is spelled one way, by its name;
why these six: docs/decisions/0002-one-spelling-per-setting.md (and 0072, the first four)."""
from __future__ import annotations

import dataclasses
import numbers
import os
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Generic, Literal, TypedDict, TypeVar, overload

from ..augment.transforms import check_sample_transform
from ..errors import OptionError
from ..sources.order import PADS
from ..sources.sample_targets import TARGETS
from .checks import flag, integer, one_of, short_repr
from .pixels import check_scale

if TYPE_CHECKING:
    from typing_extensions import Self, Unpack

ON_ERROR = ("skip", "raise")
DEFAULT_MAX_SKIPPED = 0.05
MEMORY_FORMATS = ("contiguous", "channels_last")
# loader() keywords that earlier versions took as fields of an object: `Order(seed=3)` is refused
# naming `seed=3` (they mirror torch's DataLoader, so they are flat, and only flat)
MOVED_TO_LOADER = {"Order": ("shuffle", "seed", "drop_last"), "Resources": ("workers",)}


def check_max_skipped(value: object) -> float | None:
    """`max_skipped` as a float in 0..1, or None; OptionError otherwise."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or not 0 <= float(value) <= 1:
        raise OptionError(f"Skips.max_skipped must be a fraction of the epoch's samples between 0 and 1 (0: any "
                          f"skip raises), or None for no bound, got {value!r}")
    return float(value)


class OptionGroup:
    """What the objects share: fields passed by name only, the short repr, the integer check naming
    `Class.field`, and a field that moved to a `loader()` keyword refused naming it."""

    def __new__(cls, *args: Any, **kwargs: Any) -> Self:
        moved = [name for name in MOVED_TO_LOADER.get(cls.__name__, ()) if name in kwargs]
        if moved:
            given = ", ".join(f"{name}={kwargs[name]!r}" for name in moved)
            raise OptionError(f"{cls.__name__}({given}): {' and '.join(moved)} {'is a' if len(moved) == 1 else 'are'} "
                              f"loader() keyword{'s' * (len(moved) > 1)}, as in torch's DataLoader: pass "
                              f"iofeed.loader(..., {given})")
        return super().__new__(cls)

    def __repr__(self) -> str:
        return short_repr(self)

    def _int(self, name: str, minimum: int, optional: bool = False) -> None:
        """Field `name` checked as an int >= `minimum` (None allowed when `optional`), kept as int."""
        value = integer(f"{type(self).__name__}.{name}", getattr(self, name), minimum, optional)
        object.__setattr__(self, name, value)


@dataclass(frozen=True, repr=False, kw_only=True)
class Placement(OptionGroup):
    """Where this process's batches go: the device, the share of each epoch, the layout over devices.

    device: None or "cpu" (or "cpu:N"), "cuda", "cuda:N", an ordinal or a `torch.device`. The DALI engine
        decodes there; the torch adapter copies there. A CUDA device this process cannot see (no
        GPU) is refused when the loader is made: pass "cpu". "cuda" is the current CUDA device,
        else `LOCAL_RANK`'s (torchrun), else 0.
    rank, world_size: this process's share of each epoch (pass both, or neither): every rank gets
        the same number of batches, disjoint but for padding. Default: from an initialised
        torch.distributed group, else an initialised jax.distributed (process index and count),
        else RANK/WORLD_SIZE, else (0, 1).
    sharding: with `framework="jax"`, the `jax.sharding.Sharding` of each batch (default: a
        `NamedSharding` splitting the batch axis over every device, `PartitionSpec("batch")`).
        Under `jax.distributed` each process loads `batch_size` samples of its own share and the
        arrays are the global batch of `batch_size * jax.process_count()` rows.
    """

    device: Any = None
    rank: int | None = None
    world_size: int | None = None
    sharding: Any = None

    def __post_init__(self) -> None:
        self._int("world_size", 1, optional=True)
        self._int("rank", 0, optional=True)
        if (self.rank is None) != (self.world_size is None):
            given, missing = ("rank", "world_size") if self.world_size is None else ("world_size", "rank")
            raise OptionError(f"Placement.{given}={getattr(self, given)} was given without {missing}: pass both, or "
                              "neither to take them from torch.distributed or RANK/WORLD_SIZE")
        if self.rank is not None and self.world_size is not None and self.rank >= self.world_size:
            raise OptionError(f"Placement.rank={self.rank} is outside 0..{self.world_size - 1} "
                              f"(world_size={self.world_size})")


E = TypeVar("E", bound=bool, covariant=True)  # `Output.extras`: what the batch tuple holds, for type checkers


class OutputFields(TypedDict, total=False):
    """`Output`'s fields but `extras`, as type checkers see its keywords (tests/test_types.py keeps
    them equal to the dataclass's)."""

    pixels: str | None
    dtype: Any
    memory_format: str | None
    target: str
    tokenizer: Any


@dataclass(frozen=True, repr=False, kw_only=True)
class Output(OptionGroup, Generic[E]):
    """What each batch looks like, beyond the framework's own types.

    pixels: the scale your script expects its images on: "uint8" (as decoded), "0-1" (floats,
        pixel / 255, as torchvision's `ToTensor` gives: for a script that keeps its own
        `Normalize`), "0-255" (floats, as Keras' `image_dataset_from_directory` gives) or
        "normalized" (`(pixel / 255 - mean) / std`, the recipe's mean/std else ImageNet's).
        Default: what the recipe says (`normalize=False`: uint8; `mean=`/`std=`: normalized),
        else the framework's convention (see `iofeed.loader`'s `framework`). A recipe that
        contradicts it is refused.
    dtype: the floating-point torch dtype of the images (default float32; float16/bfloat16 are
        computed in float32 and rounded once). For `framework="jax"`: "float32" (default),
        "bfloat16" (normalised) or "uint8" (as decoded), as a name or a numpy/JAX dtype.
    memory_format: with `framework="torch"`, "contiguous" (the default: plain NCHW, what a model
        in PyTorch's default format expects; DDP warns "Grad strides do not match bucket view
        strides" otherwise) or "channels_last" (NHWC memory: pays with the model converted too,
        `model.to(memory_format=torch.channels_last)`, under AMP on a GPU).
    target: "class" (int64 class indices), "multi_hot" (float32 (batch, classes) vectors, 1 for
        each class of a multi-label sample; a single-label dataset gives one-hot rows), or for a
        dataset made from a COCO folder "boxes" / "masks" (docs/formats.md: boxes and masks
        follow every crop, resize and flip; torch, numpy and jax), or for a dataset preprocessed
        with `--target text` "text": each batch is (images, captions), `captions` a list of str
        in sample order (docs/formats.md, "Captions"; not with framework="tf" or "keras").
    tokenizer: with target="text", a callable taking one caption and returning its token ids (a
        list of ints, a 1-D array or tensor, a (1, L) one, or a mapping with "input_ids"); it runs
        in the workers, seeded per sample as `transform=` is (`rng=` taken if declared), and each
        batch is (images, ids, lengths): ids int64 (batch, longest) padded with 0 after each
        caption's `lengths[i]` ids (torch tensors on the device for torch; numpy arrays
        otherwise). Defined in a module you import, as `transform=` is. Engines: workers only.
    extras: with True each batch is (images, labels, extras), `extras` the list of the samples'
        extra JSON values (None where a sample has none), as the dataset stores them (`json`
        members: WebDataset json, labels-file columns). Not with framework="tf".
    """

    pixels: str | None = None
    dtype: Any = None
    memory_format: str | None = None
    target: str = "class"
    tokenizer: Any = None
    extras: bool = False

    if TYPE_CHECKING:  # `extras=True` adds the extras to the batch type `iofeed.loader` returns
        @overload
        def __init__(self: Output[Literal[False]], *, extras: Literal[False] = ...,
                     **fields: Unpack[OutputFields]) -> None: ...
        @overload
        def __init__(self: Output[Literal[True]], *, extras: Literal[True], **fields: Unpack[OutputFields]) -> None: ...
        @overload
        def __init__(self: Output[bool], *, extras: bool, **fields: Unpack[OutputFields]) -> None: ...
        def __init__(self, *, extras: bool = False, **fields: Unpack[OutputFields]) -> None: ...

    def __post_init__(self) -> None:
        check_scale(self.pixels)
        if self.memory_format is not None:
            one_of("Output.memory_format", self.memory_format, MEMORY_FORMATS)
        one_of("Output.target", self.target, TARGETS)
        flag("Output.extras", self.extras)
        if self.tokenizer is not None:
            if self.target != "text":
                raise OptionError(f"Output.tokenizer tokenizes captions: pass Output(target='text', tokenizer=...), "
                                  f"got target={self.target!r}")
            check_sample_transform(self.tokenizer, "Output.tokenizer")


@dataclass(frozen=True, repr=False, kw_only=True)
class Order(OptionGroup):
    """The epoch order beyond `shuffle`, `seed` and `drop_last` (loader() keywords, as in torch's
    DataLoader).

    block_shards: shards per block of `shuffle="block"` (an int >= 1): the shards are taken in a
        shuffled order, samples shuffled within each block; only two blocks are live at a time.
    pad: how an epoch's last round is filled when not `drop_last`: "ranks" (the default; every rank
        gets the same number of batches of the same shapes, as DistributedSampler gives, by
        repeating up to world_size - 1 samples: `loader.last_valid` marks them), "batches" (every
        batch full, the last padded with repeats that `last_valid` marks: no short last batch for
        a per-batch mean) or "none" (each sample exactly once: ranks may end with one batch
        fewer or a shorter last batch, so only for metrics summed locally and reduced once after
        the pass; refused under several JAX processes). docs/distributed.md says which to use.
    """

    block_shards: int = 8
    pad: str = "ranks"

    def __post_init__(self) -> None:
        self._int("block_shards", 1)
        one_of("Order.pad", self.pad, PADS)


@dataclass(frozen=True, repr=False, kw_only=True)
class Resources(OptionGroup):
    """What the engine may use on this machine beyond its `workers` (a loader() keyword).

    prefetch: batches made ahead (an int >= 1). Default: two per worker, at least 8 (workers
        engine, within `memory_budget`); 2 for DALI.
    memory_budget: bytes of memory for the workers engine's batch slots (an int >= 1; anonymous
        shared memory, not limited by /dev/shm). Default: a quarter of the memory this process
        may use (available RAM, capped by the cgroup limit), shared among local ranks; see
        `stats.settings["memory_because"]`.
    """

    prefetch: int | None = None
    memory_budget: int | None = None

    def __post_init__(self) -> None:
        for name in ("prefetch", "memory_budget"):
            self._int(name, 1, optional=True)


@dataclass(frozen=True, repr=False, kw_only=True)
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


@dataclass(frozen=True, repr=False, kw_only=True)
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


# loader()'s keyword of each object, and the object's class
GROUPS: dict[str, type[OptionGroup]] = {"placement": Placement, "output": Output, "order": Order,
                                        "resources": Resources, "cache": Cache, "skips": Skips}


def checked_group(name: str, value: Any) -> Any:
    """`loader(name=value)` for one of the objects: None gives the default one, anything but an
    object of its class is refused naming the class."""
    kind = GROUPS[name]
    if value is None:
        return kind()
    if not isinstance(value, kind):
        raise OptionError(f"{name}= takes an iofeed.{kind.__name__}(...), got {value!r} ({type(value).__name__})")
    return value


def group_fields(name: str) -> tuple[str, ...]:
    """The field names of the object `loader(name=...)` takes."""
    return tuple(f.name for f in dataclasses.fields(GROUPS[name]))  # type: ignore[arg-type]  # all are dataclasses
