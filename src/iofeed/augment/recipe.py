"""`Recipe`: the built-in per-image steps as one object — crop, flip, eval crop, interpolation,
normalisation — with the common training recipes as named presets."""
from __future__ import annotations

import math
import numbers
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from ..errors import OptionError
from .fitting import FITS

INTERPOLATIONS = ("bilinear", "bicubic", "area")
# Bounds past which a recipe is a mistake, not an augmentation: each extreme failed on every sample
# (an overflow while drawing or decoding) or silently gave the whole image (a box under one pixel).
MIN_SCALE = 1e-3  # area share: a 8x8 px crop of a 256 px image
MAX_RATIO = 100.0  # aspect ratio in [1/100, 100]
MIN_CROP_FRACTION = 0.01  # centre crop: 2.5 px of a 256 px image
JITTER_RANGE = (0.05, 4.0)  # scale jitter: LSJ's (0.1, 2.0) fits; past 4x a 640 px canvas decodes 2560 px images
STD_RANGE = (1e-3, 1.0)  # 0-1 scale: 1/255 (the 0-255 "caffe" form) to 1 (no division); 1e-3 keeps float16 finite


@dataclass(frozen=True)
class Recipe:
    """What iofeed does to every image before your own `transform=` (if any).

    Train (`train=True`, or `None` and the train split): a random-resized crop of area share
    `scale` and aspect ratio `ratio` (log-uniform), mirrored with probability 0.5 if `flip`.
    Evaluation: a centred square of `crop_fraction` of the shorter side (0.875: resize to 256
    and centre-crop 224). Both resize to `image_size` with `interpolation` ("bilinear",
    "bicubic" or "area"; antialiased when shrinking, as torchvision v2 does). The adapters
    normalise with `mean`/`std` (per channel, on the 0–1 scale only: mean in [0, 1], std in
    [0.001, 1]; ImageNet's 0–255 values (123.7, ...) are refused with the 0–1 ones to use; both
    or neither); without them, each framework's own loading convention: ImageNet mean/std for
    torch and jax (torchvision's `ToTensor` + `Normalize`, flax's ImageNet example), float32
    0–255 for keras and tf (Keras' `image_dataset_from_directory`, for models that start with
    `Rescaling(1/255)`). `normalize=False` hands out uint8 so that the GPU or your batch
    transform normalises. `fast_decode` (the default) decodes JPEGs with libjpeg-turbo's fast
    integer IDCT and plain chroma upsampling (simplejpeg's `fastdct`/`fastupsample`, as FFCV does)
    on the workers engine: ~8% less decode time, pixels 0.5-0.9 levels off on average, and the
    same validation accuracy (docs/benchmarks.md, "The CPU floor": the accuracy-parity run);
    `fast_decode=False` for libjpeg-turbo's exact pixels (engines without a fast mode, `dali`
    and `nvjpeg`, always decode exactly). `region_decode=True` decodes only a
    small crop's rows and columns, exactly (the `region` extra, nvImageCodec's CPU decoder):
    measured no faster than the full decode on 256 px images
    (docs/decisions/0090-region-decode.md), so off by default. Extremes are refused when the
    recipe is made: scale below 0.001, ratio outside [1/100, 100], crop_fraction below 0.01, or
    anything not finite.

    Detection geometry (`target="boxes"`/`"masks"`, the workers engine; `augment/fitting.py`):
    `fit="crop"` is the random-resized crop above; the others keep the whole image's aspect
    ratio: `"letterbox"` scales the longer side to `image_size` x a factor drawn uniformly from
    `scale_jitter`, cuts a random `image_size` window where it is larger and pads the rest
    centred with `fill` (YOLO); `"pad"` does the same padding right and bottom (torchvision's
    `ScaleJitter` + `FixedSizeCrop`, large-scale jitter); `"shorter_side"` scales the shorter
    side instead (DETR's and torchvision's `RandomShortestSize`), then crops and pads right and
    bottom. Then a flip of the whole canvas if `flip`. `fill` is the image padding's grey level
    (or R, G, B); instance masks pad with 0, semantic ones with 255. Evaluation letterboxes.
    """

    train: bool | None = None  # None: augment the train split only
    scale: tuple[float, float] = (0.08, 1.0)
    ratio: tuple[float, float] = (3 / 4, 4 / 3)
    flip: bool = True
    crop_fraction: float = 0.875
    interpolation: str = "bilinear"
    mean: tuple[float, float, float] | None = None  # None (with std): the framework's convention
    std: tuple[float, float, float] | None = None
    normalize: bool = True
    fast_decode: bool = True  # libjpeg-turbo's fastdct + fastupsample on the workers engine (parity measured)
    region_decode: bool = False  # only a small crop's region, with the `region` extra (workers engine)
    image_size: int | None = None  # the model's input side, when the recipe knows it (from_timm); else the loader's
    min_visible: float = 0.25  # target="boxes"/"masks": a box keeps at least this share of its area in the crop
    fit: str = "crop"  # target="boxes"/"masks": "crop", or the whole image kept: "letterbox", "pad", "shorter_side"
    scale_jitter: tuple[float, float] = (1.0, 1.0)  # fit != "crop": the fitted scale times U(lo, hi)
    fill: int | tuple[int, int, int] = 0  # fit != "crop": the padding's grey level (or R, G, B), 0-255

    def __post_init__(self) -> None:
        if not (self.train is None or isinstance(self.train, bool)):
            raise OptionError(f"Recipe train must be True, False or None, got {self.train!r}")
        object.__setattr__(self, "scale", _pair("scale", self.scale, MIN_SCALE, 1.0))
        object.__setattr__(self, "ratio", _pair("ratio", self.ratio, 1 / MAX_RATIO, MAX_RATIO))
        for name in ("flip", "normalize", "fast_decode", "region_decode"):
            if not isinstance(getattr(self, name), bool):
                raise OptionError(f"Recipe {name} must be True or False, got {getattr(self, name)!r}")
        if not _real(self.min_visible) or not 0.0 <= self.min_visible <= 1.0:
            raise OptionError(f"Recipe min_visible must be a number in [0, 1] (the share of a box's area left in "
                              f"the crop for it to be kept), got {self.min_visible!r}")
        if self.fit not in FITS:
            raise OptionError(f"Recipe fit={self.fit!r} is not one of {', '.join(FITS)}")
        object.__setattr__(self, "scale_jitter", _pair("scale_jitter", self.scale_jitter, *JITTER_RANGE))
        object.__setattr__(self, "fill", _fill(self.fill))
        fraction = self.crop_fraction
        if not _real(fraction) or not MIN_CROP_FRACTION <= fraction <= 1.0:
            raise OptionError(f"Recipe crop_fraction must be a number in [{MIN_CROP_FRACTION}, 1] (the centre "
                              f"square's share of the shorter side), got {fraction!r}")
        object.__setattr__(self, "crop_fraction", float(fraction))
        if self.interpolation not in INTERPOLATIONS:
            raise OptionError(f"Recipe interpolation={self.interpolation!r} is not one of {', '.join(INTERPOLATIONS)}")
        for name, bounds in (("mean", (0.0, 1.0)), ("std", STD_RANGE)):
            if getattr(self, name) is not None:
                object.__setattr__(self, name, _channels(name, getattr(self, name), bounds))
        if (self.mean is None) != (self.std is None):
            given = "mean" if self.std is None else "std"
            raise OptionError(f"Recipe {given}= was given without {'std' if given == 'mean' else 'mean'}=: pass "
                              "both, or neither for the framework's convention (ImageNet mean/std for torch and "
                              "jax, 0-255 floats for keras and tf)")
        size = self.image_size
        if size is not None and (isinstance(size, bool) or not isinstance(size, numbers.Integral) or size < 8):
            raise OptionError(f"Recipe image_size must be an int >= 8 or None, got {size!r}")

    @classmethod
    def from_timm(cls, data_config: Any, **changes: Any) -> Recipe:
        """The recipe of a timm model's data config — the dict `timm.data.resolve_data_config`
        (or `resolve_model_data_config`) returns: `input_size` (its side becomes `image_size`),
        `interpolation`, `mean`/`std` and `crop_pct`; the train crop is timm's default
        (area 0.08-1, ratio 3/4-4/3, flip). `changes` are applied after. timm need not be
        installed. OptionError naming the key for what iofeed cannot do."""
        from .timm_config import timm_recipe

        recipe: Recipe = timm_recipe(cls, data_config)
        return replace(recipe, **changes)

    @classmethod
    def preset(cls, name: str, **changes: Any) -> Recipe:
        """The preset `name` (see `PRESETS`), with `changes` applied."""
        if not isinstance(name, str) or name not in PRESETS:
            raise OptionError(f"augment={name!r} is not a preset: one of {', '.join(PRESETS)}, True, False, None "
                              "or an iofeed.Recipe(...)")
        return replace(PRESETS[name], **changes)

    def is_train(self, split: str) -> bool:
        """Whether images of `split` get the random crop and flip (else the centre crop)."""
        return split == "train" if self.train is None else self.train


def recipe_of(augment: Any) -> Recipe:
    """The `Recipe` `loader(augment=...)` means: None (train split only), True, False, a preset
    name or a `Recipe`. OptionError naming the value otherwise."""
    if isinstance(augment, Recipe):
        return augment
    if augment is None or isinstance(augment, bool):
        return Recipe(train=augment)
    if isinstance(augment, str):
        return Recipe.preset(augment)
    raise OptionError(f"augment={augment!r} is not True, False, None, a preset ({', '.join(PRESETS)}) "
                      "or an iofeed.Recipe(...)")


def _real(value: Any) -> bool:
    return isinstance(value, numbers.Real) and not isinstance(value, bool)


def _pair(name: str, value: Any, low: float, high: float) -> tuple[float, float]:
    """(a, b) with low <= a <= b <= high (finite): OptionError naming the value otherwise."""
    try:
        a, b = value
    except (TypeError, ValueError):
        a = b = None
    if not (_real(a) and _real(b) and low <= a <= b <= high):
        raise OptionError(f"Recipe {name} must be a pair (a, b) with {low:g} <= a <= b <= {high:g}, got {value!r}")
    return float(a), float(b)


def _fill(value: Any) -> int | tuple[int, int, int]:
    """A grey level or three channel levels, each an int in [0, 255]: OptionError naming the value otherwise."""
    def level(v: Any) -> bool:
        return isinstance(v, (int, np.integer)) and not isinstance(v, bool) and 0 <= int(v) <= 255

    if level(value):
        return int(value)
    if isinstance(value, (tuple, list)) and len(value) == 3 and all(level(v) for v in value):
        return int(value[0]), int(value[1]), int(value[2])
    raise OptionError(f"Recipe fill must be an int in [0, 255] or three of them (R, G, B), got {value!r}")


def _channels(name: str, value: Any, bounds: tuple[float, float]) -> tuple[float, float, float]:
    """Three per-channel numbers within `bounds` (the 0-1 scale); values that fit the 0-255 scale
    instead are refused with the 0-1 values to pass."""
    try:
        values = tuple(value)
    except TypeError:
        values = ()
    low, high = bounds
    if len(values) == 3 and all(_real(v) and low <= v <= high for v in values):
        first, second, third = (float(v) for v in values)
        return first, second, third
    if len(values) == 3 and all(_real(v) and math.isfinite(v) and 1 < v <= 255 * high for v in values):
        scaled = ", ".join(f"{v / 255:.4g}" for v in values)
        raise OptionError(f"Recipe {name}={value!r} looks like the 0-255 scale; Recipe takes the 0-1 scale (the "
                          f"adapters divide pixels by 255 first): pass {name}=({scaled})")
    raise OptionError(f"Recipe {name} must be 3 numbers in [{low:g}, {high:g}] (R, G, B on the 0-1 scale), "
                      f"got {value!r}")


# The common recipes. `train` stays None in each: the train split is augmented, others centre-cropped.
PRESETS: dict[str, Recipe] = {
    "imagenet": Recipe(),  # torchvision's ImageNet reference: bilinear, the framework's scale (the default)
    "finetune": Recipe(scale=(0.35, 1.0)),  # fine-tuning: milder crops
    "timm": Recipe(interpolation="bicubic"),  # timm's defaults for ImageNet-pretrained models
    "inception": Recipe(interpolation="bicubic", mean=(0.5, 0.5, 0.5), std=(0.5, 0.5, 0.5)),  # [-1, 1] models
    "uint8": Recipe(normalize=False),  # normalise yourself (on the GPU, or in batch_transform)
    "detection": Recipe(scale=(0.3, 1.0), ratio=(0.5, 2.0), min_visible=0.25),  # crops that keep most objects
    # Ultralytics YOLO: letterbox to a square, scale gain 1 +- 0.5 (`scale=0.5`), grey 114 padding,
    # flip; a box keeps > 10% of its area (`box_candidates(area_thr=0.1)`). Mosaic, mixup and HSV are not done.
    "yolo": Recipe(fit="letterbox", scale_jitter=(0.5, 1.5), fill=114, min_visible=0.1),
    # DETR (facebookresearch/detr): flip, shorter side drawn from 480-800 of 800 (here a uniform share of
    # image_size), random crop; any box with area left is kept. DETR pads to the batch's largest image;
    # iofeed pads to a fixed square, right and bottom, with 0.
    "detr": Recipe(fit="shorter_side", scale_jitter=(0.6, 1.0), min_visible=0.0),
    # torchvision's detection reference, `--data-augmentation lsj`: ScaleJitter(scale_range=(0.1, 2.0)) +
    # FixedSizeCrop(fill=ImageNet mean) + RandomHorizontalFlip; any box with area left is kept.
    "torchvision-detection": Recipe(fit="pad", scale_jitter=(0.1, 2.0), fill=(123, 117, 104), min_visible=0.0),
}
