"""Crop boxes for training (random-resized-crop + flip) and evaluation (resize + centre crop)."""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

Box = tuple[float, float, float, float]  # left, top, right, bottom in source pixels


@dataclass(frozen=True)
class Augment:
    """What to do with each image: output side, train-time randomness or a centre crop."""

    size: int = 224
    train: bool = True
    scale: tuple[float, float] = (0.08, 1.0)
    ratio: tuple[float, float] = (3 / 4, 4 / 3)
    flip: bool = True
    center_fraction: float = 0.875  # centre crop of 224 after resizing to 256
    interpolation: str = "bilinear"  # "bilinear", "bicubic" or "area" (see `image/resize.py`)
    fast_decode: bool = False  # libjpeg-turbo's fast IDCT and chroma upsampling (`Recipe(fast_decode=)`)
    region_decode: bool = False  # only a small crop's region where that pays (`Recipe(region_decode=)`)
    letterbox: bool = False  # evaluation with targets: the whole image, resized to fit, padded (no crop)
    fit: str = "crop"  # training with targets: "crop", or the whole image kept (`augment/fitting.py`)
    scale_jitter: tuple[float, float] = (1.0, 1.0)  # fit != "crop": the fitted scale's factor range
    fill: int | tuple[int, int, int] = 0  # fit != "crop": the image padding
    fixed: tuple[Box, bool] | None = None  # a crop and flip drawn already (the fitted placement)

    @property
    def fitted(self) -> bool:
        """Whether training keeps the whole image's aspect ratio (scale, window, pad: `fit`)."""
        return self.train and self.fit != "crop"

    def box(self, width: int, height: int, rng: np.random.Generator) -> tuple[Box, bool]:
        """The source box to resize to `size` x `size`, and whether to flip horizontally."""
        if self.fixed is not None:
            return self.fixed
        if not self.train and self.letterbox:
            return (0.0, 0.0, float(width), float(height)), False
        if not self.train:
            return center_box(width, height, self.center_fraction), False
        box = random_resized_box(width, height, rng, self.scale, self.ratio)
        return box, bool(self.flip and rng.random() < 0.5)


def center_box(width: int, height: int, fraction: float) -> Box:
    """A centred square of side `fraction` x the shorter side."""
    side = min(width, height) * fraction
    left, top = (width - side) / 2, (height - side) / 2
    return left, top, left + side, top + side


def random_resized_box(
    width: int, height: int, rng: np.random.Generator, scale: tuple[float, float], ratio: tuple[float, float]
) -> Box:
    """A box of random area share in `scale` and aspect ratio in `ratio` (log-uniform).

    Ten tries, then a centre crop clamped to `ratio` (at least one pixel): the scheme of
    torchvision's `RandomResizedCrop`, the usual augmentation for ImageNet training.
    """
    area = width * height
    log_lo, log_hi = math.log(ratio[0]), math.log(ratio[1])
    for _ in range(10):
        target = area * rng.uniform(scale[0], scale[1])
        aspect = math.exp(rng.uniform(log_lo, log_hi))
        w = round(math.sqrt(target * aspect))
        h = round(math.sqrt(target / aspect))
        if 0 < w <= width and 0 < h <= height:
            left = int(rng.integers(0, width - w + 1))
            top = int(rng.integers(0, height - h + 1))
            return left, top, left + w, top + h
    aspect = width / height
    if aspect < ratio[0]:
        w, h = width, max(1, round(width / ratio[0]))
    elif aspect > ratio[1]:
        w, h = max(1, round(height * ratio[1])), height
    else:
        w, h = width, height
    left, top = (width - w) // 2, (height - h) // 2
    return left, top, left + w, top + h
