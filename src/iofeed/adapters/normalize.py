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
PIXELS_AFFINE: Affine = ((1.0, 1.0, 1.0), (0.0, 0.0, 0.0))  # float32 0-255, as stored

# Each framework's loading convention, for a recipe without mean/std: Keras' and tf.data's
# `image_dataset_from_directory` hand out float32 0-255 (models start with Rescaling(1/255));
# torchvision's ToTensor + Normalize and flax's ImageNet example normalise with ImageNet's.
CONVENTIONS: dict[str, Affine] = {"keras": PIXELS_AFFINE, "tf": PIXELS_AFFINE}

HOST = "host"  # where a batch is normalised: with numpy on the consumer's thread (else a device's name)


def convention_affine(framework: str) -> Affine:
    """The affine `framework` applies when the recipe names no mean/std."""
    return CONVENTIONS.get(framework, IMAGENET_AFFINE)


def options_affine(options: Any) -> Affine | None:
    """The affine of a loader's `LoaderOptions` (its recipe's mean and std, else the framework's
    convention), or None when the recipe asks for uint8 output (`normalize=False`). Every adapter
    takes its normalisation here."""
    recipe = options.recipe
    if not recipe.normalize:
        return None
    return convention_affine(options.framework) if recipe.mean is None else uint8_affine(recipe.mean, recipe.std)


def record_normalise_on(loader: Any, where: str | None) -> None:
    """`loader.stats.settings["normalise_on"]`: where its batches are normalised — "host" (numpy on
    the training process's thread), a device ("cuda:0", "gpu"), or None when they are
    handed out as they come (uint8, or a sample transform's floats). Decided once, at `loader()`."""
    loader.stats.fixed["normalise_on"] = where
