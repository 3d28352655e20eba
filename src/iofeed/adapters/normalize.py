"""Normalisation every adapter applies: the ImageNet mean and std by default, or the recipe's."""
from __future__ import annotations

from typing import Any

IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)

Affine = tuple[tuple[float, ...], tuple[float, ...]]


def uint8_affine(mean: tuple[float, ...] = IMAGENET_MEAN, std: tuple[float, ...] = IMAGENET_STD) -> Affine:
    """Per-channel (scale, shift) with x * scale + shift == (x / 255 - mean) / std for uint8 x."""
    scale = tuple(1.0 / (255.0 * s) for s in std)
    shift = tuple(-m / s for m, s in zip(mean, std))
    return scale, shift


IMAGENET_AFFINE: Affine = uint8_affine()


def options_affine(options: Any) -> Affine | None:
    """The affine of a loader's `LoaderOptions` (its recipe's mean and std), or None when the
    recipe asks for uint8 output (`normalize=False`). Every adapter takes its normalisation here."""
    recipe = options.recipe
    return uint8_affine(recipe.mean, recipe.std) if recipe.normalize else None
