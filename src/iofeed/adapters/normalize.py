"""Normalisation every adapter applies: the ImageNet mean and std by default, or the recipe's."""
from __future__ import annotations

from typing import Any

from ..options.pixels import BYTES, NORMALIZED, UINT8, UNIT

IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)

Affine = tuple[tuple[float, ...], tuple[float, ...]]


def uint8_affine(mean: tuple[float, ...] = IMAGENET_MEAN, std: tuple[float, ...] = IMAGENET_STD) -> Affine:
    """Per-channel (scale, shift) with x * scale + shift == (x / 255 - mean) / std for uint8 x."""
    scale = tuple(1.0 / (255.0 * s) for s in std)
    shift = tuple(-m / s for m, s in zip(mean, std))
    return scale, shift


IMAGENET_AFFINE: Affine = uint8_affine()
PIXELS_AFFINE: Affine = ((1.0, 1.0, 1.0), (0.0, 0.0, 0.0))  # float32 0-255, as stored
UNIT_AFFINE: Affine = uint8_affine((0.0, 0.0, 0.0), (1.0, 1.0, 1.0))  # float32 0-1, as torchvision's ToTensor
SCALE_AFFINES: dict[str, Affine] = {BYTES: PIXELS_AFFINE, UNIT: UNIT_AFFINE}

HOST = "host"  # where a batch is normalised: with numpy on the consumer's thread (else a device's name)


def options_affine(options: Any) -> Affine | None:
    """The affine of a loader's `LoaderOptions`, from the scale it hands out (`Output.pixels`, else the
    recipe, else the framework's convention: `pixels.pixel_scale`): the recipe's mean/std (else
    ImageNet's) for "normalized", None for "uint8". Every adapter takes its normalisation here."""
    scale = options.pixel_scale
    if scale == UINT8:
        return None
    if scale == NORMALIZED:
        recipe = options.recipe
        return IMAGENET_AFFINE if recipe.mean is None else uint8_affine(recipe.mean, recipe.std)
    return SCALE_AFFINES[scale]


def normalises(affine: Affine | None) -> bool:
    """Whether `affine` subtracts a mean and divides by a std (rather than only rescaling 0-255 to
    a float scale, or nothing): what a second normalisation would be applied on top of."""
    return affine is not None and affine not in SCALE_AFFINES.values()


def record_normalise_on(loader: Any, where: str | None) -> None:
    """`loader.stats.settings["normalise_on"]`: where its batches are normalised — "host" (numpy on
    the training process's thread), a device ("cuda:0", "gpu"), or None when they are
    handed out as they come (uint8, or a sample transform's floats). Decided once, at `loader()`."""
    loader.stats.fixed["normalise_on"] = where
