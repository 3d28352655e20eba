"""`LoaderOptions`: every setting of `iofeed.loader` but the source, validated once, before any work."""
from __future__ import annotations

import os
import sys
from dataclasses import dataclass, field, fields
from typing import Any

import numpy as np

from ..augment.recipe import Recipe, recipe_of
from ..augment.transforms import check_batch_transform, check_sample_transform
from ..errors import OptionError
from ..image.boxes import Augment
from ..runtime.gpu.device import usable_device
from ..sources.order import OrderSpec
from ..sources.sample_targets import check_target_options
from .adapter_choices import ADAPTERS, wants_host_arrays
from .checks import either, flag, integer, one_of, short_repr
from .engine_choices import AUTO, ENGINES
from .groups import FLAT, GROUPS, Cache, Order, Resources, Skips, checked_group
from .pixels import UINT8, pixel_scale


@dataclass(frozen=True, repr=False)
class LoaderOptions:
    """The loader's settings (see `iofeed.loader` for each, and the four objects for theirs). Built
    once by `loader()` and handed whole to the engine and the adapter; a bad value raises a one-line
    OptionError here, before any file is opened or any shared memory made, and no user code runs
    here (the workers engine probes `transform`). `device` is resolved here, once, to "cpu" or
    "cuda:N"; rank and world size come from `placement()`. Integers may be numpy integers (kept as
    int); booleans are not integers here."""

    batch_size: int
    split: str = "train"
    image_size: int | None = None  # None: the recipe's (Recipe.from_timm), else 224
    augment: bool | str | Recipe | None = None  # see `recipe`
    pixels: str | None = None  # the scale images are handed out on (see `pixel_scale`)
    framework: str = "numpy"
    device: Any = None  # the one device of this loader: the engine decodes and the adapter copies there
    dtype: Any = None
    backend: str = AUTO
    rank: int | None = None
    world_size: int | None = None
    gpu_augment: bool = False
    target: str = "class"  # "multi_hot": float32 (batch, classes) labels (targets.py)
    extras: bool = False  # each batch also carries its samples' extras (any JSON)
    transform: Any = None  # per sample, in the workers (see `iofeed.augment.transforms`)
    batch_transform: Any = None  # per batch, in the adapter
    sharding: Any = None  # framework="jax": how a batch is laid out over devices (None: the batch axis over all)
    memory_format: str | None = None  # framework="torch": "contiguous" (None) or "channels_last"
    order: Order = field(default_factory=Order)
    resources: Resources = field(default_factory=Resources)
    cache: Cache = field(default_factory=Cache)
    skips: Skips = field(default_factory=Skips)

    def __post_init__(self) -> None:
        for name in ("order", "resources", "cache", "skips"):
            object.__setattr__(self, name, checked_group(name, getattr(self, name)))
        object.__setattr__(self, "device", usable_device(self.device))  # once: engine and adapter take this one
        check_target_options(self.target, self.extras, self.framework)
        self._resolve_image_size()
        for name, minimum in (("batch_size", 1), ("image_size", 8)):
            object.__setattr__(self, name, integer(name, getattr(self, name), minimum))
        for name, minimum in (("world_size", 1), ("rank", 0)):
            object.__setattr__(self, name, integer(name, getattr(self, name), minimum, optional=True))
        flag("gpu_augment", self.gpu_augment)
        if not isinstance(self.split, str) or not self.split:
            raise OptionError(f"split must be a split name such as 'train' or 'val', got {self.split!r}")
        one_of("framework", self.framework, ADAPTERS.names())
        pixel_scale(self.pixels, self.recipe, self.framework)  # a scale the recipe or framework contradicts
        one_of("backend", self.backend, (AUTO, *ENGINES.names()))
        self._check_placement()
        check_sample_transform(self.transform)
        check_batch_transform(self.batch_transform)
        self._check_combinations()

    def __repr__(self) -> str:
        return short_repr(self)

    def keywords(self) -> dict[str, Any]:
        """Every option by its `loader()` keyword, a grouped one by its flat spelling (`seed`,
        `workers`, `cache_dir`, ...) or, without one, as `group.field`: what
        `stats.settings["options"]` records, one schema whichever spelling was passed."""
        flat = {target: name for name, target in FLAT.items()}
        out = {f.name: getattr(self, f.name) for f in fields(self) if f.init and f.name not in GROUPS}
        for group in GROUPS:
            for f in fields(getattr(self, group)):
                out[flat.get((group, f.name), f"{group}.{f.name}")] = getattr(getattr(self, group), f.name)
        return out

    def _resolve_image_size(self) -> None:
        """`image_size` from the recipe when it knows the model's input side; the two must agree."""
        from_recipe = self.recipe.image_size
        if self.image_size is None:
            object.__setattr__(self, "image_size", from_recipe or DEFAULT_IMAGE_SIZE)
        elif from_recipe is not None and self.image_size != from_recipe:
            raise OptionError(f"image_size={self.image_size!r} disagrees with the recipe's image_size={from_recipe} "
                              "(the model's input side): drop image_size=")

    def _check_placement(self) -> None:
        if (self.rank is None) != (self.world_size is None):
            given, missing = ("rank", "world_size") if self.world_size is None else ("world_size", "rank")
            raise OptionError(f"{given}={getattr(self, given)} was given without {missing}: pass both, or neither "
                              "to take them from torch.distributed or RANK/WORLD_SIZE")
        if self.rank is not None and self.world_size is not None and self.rank >= self.world_size:
            raise OptionError(f"rank={self.rank} is outside 0..{self.world_size - 1} (world_size={self.world_size})")

    def _check_combinations(self) -> None:
        adapter = ADAPTERS.caps(self.framework)
        if self.gpu_augment and not (adapter.packs and (self.backend == AUTO or ENGINES.caps(self.backend).packs)):
            raise OptionError(f"gpu_augment=True needs framework={either(ADAPTERS.having('packs'))} and "
                              f"backend={either((AUTO, *ENGINES.having('packs')))}, got framework={self.framework!r}"
                              f", backend={self.backend!r}")
        self._check_recipe()
        if self.moves_targets:
            self._check_box_targets()
        if self.sharding is not None and not adapter.sharding:
            raise OptionError(f"sharding= is for framework={either(ADAPTERS.having('sharding'))}, "
                              f"got framework={self.framework!r} (drop sharding=)")
        if self.memory_format is not None:
            if self.framework != "torch":
                raise OptionError(f"memory_format= is for framework='torch' (NCHW tensors), got framework="
                                  f"{self.framework!r}: drop memory_format=")
            one_of("memory_format", self.memory_format, MEMORY_FORMATS)
        if self.dtype is not None and not adapter.dtype:
            raise OptionError(f"dtype={self.dtype!r} is for framework={either(ADAPTERS.having('dtype'))}: "
                              f"framework={self.framework!r} has a fixed dtype (drop dtype=)")
        torch = sys.modules.get("torch")  # a torch dtype passed means torch is imported already
        torch_dtype = torch is not None and isinstance(self.dtype, torch.dtype) and self.dtype.is_floating_point
        if self.framework == "torch" and self.dtype is not None and not torch_dtype:  # jax checks its own
            raise OptionError(f"dtype={self.dtype!r} is not a floating-point torch dtype: pass torch.float32 (the "
                              "default), torch.float16 or torch.bfloat16")

    def _check_recipe(self) -> None:
        """The built-in steps and the user's transform against the engine and `gpu_augment`."""
        recipe = self.recipe
        if self.backend != AUTO:
            caps = ENGINES.caps(self.backend)
            if recipe.interpolation not in caps.interpolations:
                able = ENGINES.having_value("interpolations", recipe.interpolation)
                raise OptionError(f"interpolation={recipe.interpolation!r} is not done by backend={self.backend!r}: "
                                  f"use backend={either(able)}, or one of {', '.join(caps.interpolations)}")
            if self.transform is not None and not caps.runs_transforms:
                raise OptionError(f"transform= runs in worker processes, not in backend={self.backend!r} (its "
                                  f"pipeline calls no Python per sample): pass backend="
                                  f"{either(ENGINES.having('runs_transforms'))} or 'auto'")
        if self.dtype is not None and self.pixel_scale == UINT8:
            why = "pixels='uint8'" if self.pixels is not None else "the recipe has normalize=False"
            raise OptionError(f"dtype={self.dtype!r} is the dtype of float images, and {why} (uint8 images): drop "
                              "one of them")
        if self.gpu_augment and recipe.interpolation != "bilinear":
            raise OptionError(f"gpu_augment=True resizes bilinear only, got interpolation={recipe.interpolation!r}: "
                              "drop gpu_augment (the workers resize on the CPU) or use interpolation='bilinear'")
        if self.gpu_augment and self.transform is not None:
            raise OptionError("transform= runs on the images the workers crop, and gpu_augment=True crops on the "
                              "GPU after them: drop gpu_augment (or do the work on the GPU with batch_transform=)")

    def _check_box_targets(self) -> None:
        """target="boxes"/"masks": an engine that moves them, and no step they cannot follow."""
        if self.backend != AUTO and not ENGINES.caps(self.backend).targets:
            raise OptionError(f"target={self.target!r}: backend={self.backend!r} does not move boxes and masks with "
                              f"the pixels; use backend={either((AUTO, *ENGINES.having('targets')))}")
        for given, why in ((self.gpu_augment, "gpu_augment=True crops on the device, after the boxes are placed"),
                           (self.transform is not None, "transform= takes and returns images only"),
                           (self.extras, "extras=True: the boxes are the targets")):
            if given:
                raise OptionError(f"target={self.target!r} cannot be combined here: {why}")

    @property
    def moves_targets(self) -> bool:
        """Whether boxes (and masks) follow every crop, resize and flip (`target="boxes"` / `"masks"`)."""
        return self.target in ("boxes", "masks")

    @property
    def recipe(self) -> Recipe:
        """The built-in steps `augment` stands for (see `iofeed.Recipe`)."""
        return recipe_of(self.augment)

    @property
    def pixel_scale(self) -> str:
        """The scale images are handed out on: "uint8", "0-1", "0-255" or "normalized" (`pixels=`,
        else what the recipe says, else the framework's convention; see `options/pixels.py`)."""
        return pixel_scale(self.pixels, self.recipe, self.framework)

    @property
    def train(self) -> bool:
        """Whether batches are augmented (random-resized crop and flip) rather than centre-cropped."""
        return self.recipe.is_train(self.split)

    @property
    def augmentation(self) -> Augment:
        """The crop, flip and resize policy of every sample."""
        r = self.recipe
        return Augment(size=self.image_size, train=self.train, scale=r.scale, ratio=r.ratio, flip=r.flip,
                       center_fraction=r.crop_fraction, interpolation=r.interpolation, fast_decode=r.fast_decode,
                       region_decode=r.region_decode, letterbox=self.moves_targets and not self.train)

    @property
    def host(self) -> bool:
        """Whether the adapter wants host arrays (an engine decoding on a GPU then copies to the host)."""
        return wants_host_arrays(self.framework, self.cuda)

    @property
    def cuda(self) -> bool:
        """Whether the loader's device is a CUDA device ("cuda:N")."""
        return bool(self.device != "cpu")

    @property
    def deals_once(self) -> bool:
        """Whether an epoch deals each sample exactly once: `Order(pad="none")` without `drop_last`,
        or an evaluation split on one rank (no peer shares its shapes). A skipped sample's place
        then stays empty: a spare there would be scored twice (elsewhere it keeps the batch's shape
        the ranks share, and `last_valid` marks it)."""
        if self._drop_last:
            return False
        return self.order.pad == "none" or (self.split != "train" and self.placement()[1] == 1)

    @property
    def _drop_last(self) -> bool:
        return self.split == "train" if self.order.drop_last is None else self.order.drop_last

    @property
    def follows_group(self) -> bool:
        """Whether rank and world size come from the environment (`placement()` may change once a
        process group starts: Lightning and other trainers start it after the loader is made)."""
        return self.rank is None

    def placement(self) -> tuple[int, int]:
        """(rank, world_size): as given, else from an initialised torch.distributed group, else an
        initialised jax.distributed, else RANK/WORLD_SIZE, else (0, 1)."""
        if self.rank is not None and self.world_size is not None:
            return self.rank, self.world_size
        return distributed_rank_world()

    def shuffle_for(self, streamed: bool) -> str:
        """The shuffle by its name for data that is `streamed` (or not): `Order.shuffle`, its
        default (None) and True/False resolved ("block" or "global", "none")."""
        shuffle = self.split == "train" if self.order.shuffle is None else self.order.shuffle
        if isinstance(shuffle, bool):
            return ("block" if streamed else "global") if shuffle else "none"
        return shuffle

    def order_spec(self, samples: int, shard_of: np.ndarray | None = None, streamed: bool = False,
                   plan: Any = None) -> OrderSpec:
        """The epoch order of `samples` (in shards `shard_of`, for a block order; `streamed` when they
        come from object storage; a mixture's `plan`, whose order it is then) for this rank;
        OptionError when it would hold no batch."""
        rank, world_size = self.placement()
        drop_last = self._drop_last
        shuffle = "mix" if plan is not None else self.shuffle_for(streamed)
        if self.framework == "jax" and world_size > 1 and self.order.pad == "none" and not drop_last:
            raise OptionError(f"Order(pad='none') leaves the {world_size} JAX processes uneven shares, and each must "
                              "add the same rows to a global batch: keep the default pad='ranks' and mask with "
                              "loader.last_valid, or pass drop_last=True")
        spec = OrderSpec(samples, self.batch_size, shuffle=shuffle, drop_last=drop_last, seed=self.order.seed,
                         rank=rank, world_size=world_size, block_shards=self.order.block_shards, shard_of=shard_of,
                         pad=self.order.pad, plan=plan)
        if len(spec) == 0:
            where = " on this rank" if world_size > 1 else ""
            raise OptionError(
                f"batch_size={self.batch_size} is larger than the {spec.per_rank} samples of split {self.split!r}"
                f"{where}: with drop_last=True that is no batch at all; pass drop_last=False, or a batch_size of at "
                f"most {spec.per_rank}")
        return spec


MEMORY_FORMATS = ("contiguous", "channels_last")
DEFAULT_IMAGE_SIZE = 224


def torch_group_started() -> bool:
    """Whether a torch.distributed process group is initialised in this process (torch not imported: no)."""
    dist = sys.modules.get("torch.distributed")
    return dist is not None and dist.is_available() and dist.is_initialized()


def distributed_rank_world() -> tuple[int, int]:
    """(rank, world_size) of an initialised torch.distributed group, else of an initialised
    jax.distributed (process index and count), else RANK/WORLD_SIZE, else (0, 1)."""
    if torch_group_started():
        dist = sys.modules["torch.distributed"]
        return dist.get_rank(), dist.get_world_size()
    jax = sys.modules.get("jax")
    if jax is not None and jax.distributed.is_initialized():
        return jax.process_index(), jax.process_count()
    if "RANK" in os.environ and "WORLD_SIZE" not in os.environ:
        # Taken as (0, 1), every process would read the whole split: duplicates with no word.
        raise OptionError(f"environment variable RANK={os.environ['RANK']!r} is set without WORLD_SIZE: set both "
                          "(torchrun does), unset RANK, or pass rank= and world_size=")
    if "RANK" in os.environ and "WORLD_SIZE" in os.environ:
        rank, world_size = _env_count("RANK", 0), _env_count("WORLD_SIZE", 1)
        if rank >= world_size:
            raise OptionError(f"environment variable RANK={rank} is outside 0..{world_size - 1} (WORLD_SIZE="
                              f"{world_size}): fix the launcher's variables, or pass rank= and world_size=")
        return rank, world_size
    return 0, 1


def _env_count(name: str, minimum: int) -> int:
    """The integer environment variable `name` (>= `minimum`); OptionError naming it otherwise."""
    text = os.environ[name]
    try:
        value = int(text)
    except ValueError:
        value = None
    if value is None or value < minimum:
        raise OptionError(f"environment variable {name}={text!r} is not an integer >= {minimum}: fix the "
                          "launcher's variables, or pass rank= and world_size=")
    return value
