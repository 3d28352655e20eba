"""`LoaderOptions`: every setting of `iofeed.loader` but the source, validated once, before any work."""
from __future__ import annotations

import sys
from dataclasses import dataclass, field, fields
from typing import Any

import numpy as np

from ..augment.recipe import Recipe, recipe_of
from ..augment.target_transforms import target_kind
from ..augment.transforms import check_batch_transform, check_sample_transform
from ..errors import OptionError
from ..image.boxes import Augment
from ..runtime.gpu.device import usable_device
from ..sources.order import CHOICES, OrderSpec
from .adapter_choices import ADAPTERS, wants_host_arrays
from .checks import either, flag, integer, one_of, short_repr
from .engine_choices import AUTO, ENGINES
from .fit_checks import check_fit
from .groups import GROUPS, Cache, Order, Output, Placement, Resources, Skips, checked_group
from .pixels import UINT8, pixel_scale
from .rank_world import distributed_rank_world


@dataclass(frozen=True, repr=False)
class LoaderOptions:
    """The loader's settings (see `iofeed.loader` for each, and the option objects for theirs). Built
    once by `loader()` and handed whole to the engine and the adapter; a bad value raises a one-line
    OptionError here, before any file is opened or any shared memory made, and no user code runs
    here (the workers engine probes `transform`). `device` is `placement.device` resolved here, once,
    to "cpu" or "cuda:N"; rank and world size come from `rank_and_world_size()`. Integers may be
    numpy integers (kept as int); booleans are not integers here."""

    batch_size: int
    split: str = "train"
    shuffle: str | bool | None = None  # see `shuffle_for`
    drop_last: bool | None = None  # None: True for the train split
    workers: int | None = None  # None: autotuned (workers engine), the usable cores (DALI)
    seed: int = 0
    image_size: int | None = None  # None: the recipe's (Recipe.from_timm), else 224
    augment: bool | str | Recipe | None = None  # see `recipe`
    transform: Any = None  # per sample, in the workers (see `iofeed.augment.transforms`)
    batch_transform: Any = None  # per batch, in the adapter
    gpu_augment: bool = False
    framework: str = "numpy"
    engine: str = AUTO
    placement: Placement = field(default_factory=Placement)
    output: Output[Any] = field(default_factory=Output)
    order: Order = field(default_factory=Order)
    resources: Resources = field(default_factory=Resources)
    cache: Cache = field(default_factory=Cache)
    skips: Skips = field(default_factory=Skips)
    device: str = field(init=False, default="cpu")  # placement.device resolved: engine and adapter work there

    def __post_init__(self) -> None:
        for name in GROUPS:
            object.__setattr__(self, name, checked_group(name, getattr(self, name)))
        object.__setattr__(self, "device", usable_device(self.placement.device))  # once: engine and adapter take it
        self._resolve_image_size()
        for name, minimum in (("batch_size", 1), ("image_size", 8), ("seed", 0)):
            object.__setattr__(self, name, integer(name, getattr(self, name), minimum))
        object.__setattr__(self, "workers", integer("workers", self.workers, 1, optional=True))
        if self.shuffle is not None and not isinstance(self.shuffle, bool):  # True/False as DataLoader takes them
            one_of("shuffle", self.shuffle, CHOICES)
        flag("drop_last", self.drop_last, optional=True)
        flag("gpu_augment", self.gpu_augment)
        if not isinstance(self.split, str) or not self.split:
            raise OptionError(f"split must be a split name such as 'train' or 'val', got {self.split!r}")
        one_of("framework", self.framework, ADAPTERS.names())
        pixel_scale(self.output.pixels, self.recipe, self.framework)  # a scale the recipe or framework contradicts
        one_of("engine", self.engine, (AUTO, *ENGINES.names()))
        check_sample_transform(self.transform)
        check_batch_transform(self.batch_transform)
        self._check_combinations()

    def __repr__(self) -> str:
        return short_repr(self)

    def keywords(self) -> dict[str, Any]:
        """Every option by its `loader()` keyword, an object's fields as `keyword.field`
        (`resources.prefetch`): what `stats.settings["options"]` records (see `recorded`)."""
        return recorded({f.name: getattr(self, f.name) for f in fields(self) if f.init})

    def _resolve_image_size(self) -> None:
        """`image_size` from the recipe when it knows the model's input side; the two must agree."""
        from_recipe = self.recipe.image_size
        if self.image_size is None:
            object.__setattr__(self, "image_size", from_recipe or DEFAULT_IMAGE_SIZE)
        elif from_recipe is not None and self.image_size != from_recipe:
            raise OptionError(f"image_size={self.image_size!r} disagrees with the recipe's image_size={from_recipe} "
                              "(the model's input side): drop image_size=")

    def _check_combinations(self) -> None:
        adapter = ADAPTERS.caps(self.framework)
        if self.gpu_augment and not (adapter.packs and (self.engine == AUTO or ENGINES.caps(self.engine).packs)):
            raise OptionError(f"gpu_augment=True needs framework={either(ADAPTERS.having('packs'))} and "
                              f"engine={either((AUTO, *ENGINES.having('packs')))}, got framework={self.framework!r}"
                              f", engine={self.engine!r}")
        self._check_recipe()
        check_fit(self.recipe.fit, self.output.target, self.engine)
        if self.moves_targets:
            self._check_box_targets()
        if self.output.target == "text":
            self._check_text_targets()
        output = self.output
        if self.placement.sharding is not None and not adapter.sharding:
            raise OptionError(f"Placement.sharding is for framework={either(ADAPTERS.having('sharding'))}, "
                              f"got framework={self.framework!r} (drop it)")
        if output.memory_format is not None and self.framework != "torch":
            raise OptionError(f"Output.memory_format is for framework='torch' (NCHW tensors), got framework="
                              f"{self.framework!r}: drop it")
        if self.moves_targets and self.framework in ("tf", "keras") and self.batch_transform is not None:
            raise OptionError(f"Output.target={output.target!r} with framework={self.framework!r}: batch_transform= "
                              "takes (images, labels), not the boxes; move it into your model or tf.data map")
        if output.extras and self.framework == "tf":
            raise OptionError("Output.extras=True cannot travel through a tf.data.Dataset (any JSON per sample): "
                              "use framework='numpy' or 'torch', or leave extras out")
        if output.dtype is not None and not adapter.dtype:
            raise OptionError(f"Output.dtype={output.dtype!r} is for framework={either(ADAPTERS.having('dtype'))}: "
                              f"framework={self.framework!r} has a fixed dtype (drop it)")
        torch = sys.modules.get("torch")  # a torch dtype passed means torch is imported already
        torch_dtype = torch is not None and isinstance(output.dtype, torch.dtype) and output.dtype.is_floating_point
        if self.framework == "torch" and output.dtype is not None and not torch_dtype:  # jax checks its own
            raise OptionError(f"Output.dtype={output.dtype!r} is not a floating-point torch dtype: pass torch.float32 "
                              "(the default), torch.float16 or torch.bfloat16")

    def _check_recipe(self) -> None:
        """The built-in steps and the user's transform against the engine and `gpu_augment`."""
        recipe = self.recipe
        if self.engine != AUTO:
            caps = ENGINES.caps(self.engine)
            if recipe.interpolation not in caps.interpolations:
                able = ENGINES.having_value("interpolations", recipe.interpolation)
                raise OptionError(f"interpolation={recipe.interpolation!r} is not done by engine={self.engine!r}: "
                                  f"use engine={either(able)}, or one of {', '.join(caps.interpolations)}")
            if self.transform is not None and not caps.runs_transforms:
                raise OptionError(f"transform= runs in worker processes, not in engine={self.engine!r} (its "
                                  f"pipeline calls no Python per sample): pass engine="
                                  f"{either(ENGINES.having('runs_transforms'))} or 'auto'")
        if self.output.dtype is not None and self.pixel_scale == UINT8:
            why = "Output.pixels='uint8'" if self.output.pixels is not None else "the recipe has normalize=False"
            raise OptionError(f"Output.dtype={self.output.dtype!r} is the dtype of float images, and {why} (uint8 "
                              "images): drop one of them")
        if self.gpu_augment and recipe.interpolation != "bilinear":
            raise OptionError(f"gpu_augment=True resizes bilinear only, got interpolation={recipe.interpolation!r}: "
                              "drop gpu_augment (the workers resize on the CPU) or use interpolation='bilinear'")
        if self.gpu_augment and self.transform is not None:
            raise OptionError("transform= runs on the images the workers crop, and gpu_augment=True crops on the "
                              "GPU after them: drop gpu_augment (or do the work on the GPU with batch_transform=)")

    def _check_box_targets(self) -> None:
        """Output(target="boxes"/"masks"): an engine that moves them, and no step they cannot follow."""
        target = self.output.target
        if self.engine != AUTO and not ENGINES.caps(self.engine).targets:
            raise OptionError(f"Output.target={target!r}: engine={self.engine!r} does not move boxes and masks with "
                              f"the pixels; use engine={either((AUTO, *ENGINES.having('targets')))}")
        for given, why in ((self.gpu_augment, "gpu_augment=True crops on the device, after the boxes are placed"),
                           (self.output.extras, "Output.extras=True: the boxes are the targets")):
            if given:
                raise OptionError(f"Output.target={target!r} cannot be combined here: {why}")
        if self.transform is not None:
            target_kind(self.transform)  # one it knows how to hand the boxes to

    def _check_text_targets(self) -> None:
        """Output(target="text"): a framework that takes a list of strings, and an engine that runs
        the tokenizer where one is given."""
        if self.framework in ("tf", "keras"):
            raise OptionError(f"Output.target='text' is not built for framework={self.framework!r} (captions are a "
                              "list of str per batch): use framework='torch', 'numpy' or 'jax'")
        if self.output.tokenizer is not None and self.engine != AUTO and not ENGINES.caps(self.engine).runs_transforms:
            raise OptionError(f"Output.tokenizer runs in worker processes, not in engine={self.engine!r} (its pipeline "
                              f"calls no Python per sample): pass engine={either(ENGINES.having('runs_transforms'))} "
                              "or 'auto', or leave the tokenizer out and tokenize the captions in your loop")

    @property
    def moves_targets(self) -> bool:
        """Whether boxes (and masks) follow every crop, resize and flip (`Output(target="boxes")` / "masks")."""
        return self.output.target in ("boxes", "masks")

    @property
    def recipe(self) -> Recipe:
        """The built-in steps `augment` stands for (see `iofeed.Recipe`)."""
        return recipe_of(self.augment)

    @property
    def pixel_scale(self) -> str:
        """The scale images are handed out on: "uint8", "0-1", "0-255" or "normalized" (`Output.pixels`,
        else what the recipe says, else the framework's convention; see `options/pixels.py`)."""
        return pixel_scale(self.output.pixels, self.recipe, self.framework)

    @property
    def train(self) -> bool:
        """Whether batches are augmented (random-resized crop and flip) rather than centre-cropped."""
        return self.recipe.is_train(self.split)

    @property
    def resolved_image_size(self) -> int:
        """`image_size` as `__post_init__` resolved it (the recipe's, else 224): the side of every image."""
        assert self.image_size is not None, "resolved in __post_init__"
        return self.image_size

    @property
    def augmentation(self) -> Augment:
        """The crop, flip and resize policy of every sample."""
        r = self.recipe
        return Augment(size=self.resolved_image_size, train=self.train, scale=r.scale, ratio=r.ratio, flip=r.flip,
                       center_fraction=r.crop_fraction, interpolation=r.interpolation, fast_decode=r.fast_decode,
                       region_decode=r.region_decode, letterbox=self.moves_targets and not self.train,
                       fit=r.fit, scale_jitter=r.scale_jitter, fill=r.fill)

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
        return self.order.pad == "none" or (self.split != "train" and self.rank_and_world_size()[1] == 1)

    @property
    def _drop_last(self) -> bool:
        return self.split == "train" if self.drop_last is None else self.drop_last

    @property
    def follows_group(self) -> bool:
        """Whether rank and world size come from the environment (`rank_and_world_size()` may change
        once a process group starts: Lightning and other trainers start it after the loader is made)."""
        return self.placement.rank is None

    def rank_and_world_size(self) -> tuple[int, int]:
        """(rank, world_size): as given, else from an initialised torch.distributed group, else an
        initialised jax.distributed, else RANK/WORLD_SIZE, else (0, 1)."""
        if self.placement.rank is not None and self.placement.world_size is not None:
            return self.placement.rank, self.placement.world_size
        return distributed_rank_world()

    def shuffle_for(self, streamed: bool) -> str:
        """The shuffle by its name for data that is `streamed` (or not): `shuffle`, its default
        (None) and True/False resolved ("block" or "global", "none")."""
        shuffle = self.split == "train" if self.shuffle is None else self.shuffle
        if isinstance(shuffle, bool):
            return ("block" if streamed else "global") if shuffle else "none"
        return shuffle

    def order_spec(self, samples: int, shard_of: np.ndarray | None = None, streamed: bool = False,
                   plan: Any = None) -> OrderSpec:
        """The epoch order of `samples` (in shards `shard_of`, for a block order; `streamed` when they
        come from object storage; a mixture's `plan`, whose order it is then) for this rank;
        OptionError when it would hold no batch."""
        rank, world_size = self.rank_and_world_size()
        drop_last = self._drop_last
        shuffle = "mix" if plan is not None else self.shuffle_for(streamed)
        if self.framework == "jax" and world_size > 1 and self.order.pad == "none" and not drop_last:
            raise OptionError(f"Order(pad='none') leaves the {world_size} JAX processes uneven shares, and each must "
                              "add the same rows to a global batch: keep the default pad='ranks' and mask with "
                              "loader.last_valid, or pass drop_last=True")
        spec = OrderSpec(samples, self.batch_size, shuffle=shuffle, drop_last=drop_last, seed=self.seed,
                         rank=rank, world_size=world_size, block_shards=self.order.block_shards, shard_of=shard_of,
                         pad=self.order.pad, plan=plan)
        if len(spec) == 0:
            where = " on this rank" if world_size > 1 else ""
            raise OptionError(
                f"batch_size={self.batch_size} is larger than the {spec.per_rank} samples of split {self.split!r}"
                f"{where}: with drop_last=True that is no batch at all; pass drop_last=False, or a batch_size of at "
                f"most {spec.per_rank}")
        return spec


DEFAULT_IMAGE_SIZE = 224


def recorded(keywords: dict[str, Any]) -> dict[str, Any]:
    """`loader()` keywords as `stats.settings["options"]` records them: each object's fields by
    `keyword.field` (`order=Order(block_shards=2)` is `order.block_shards`), the rest as given."""
    out = {}
    for name, value in keywords.items():
        if name in GROUPS and value is not None:
            out.update({f"{name}.{f.name}": getattr(value, f.name) for f in fields(value)})
        else:
            out[name] = value
    return out
