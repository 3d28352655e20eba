"""ImageNet normalisation: the mean and std every adapter and benchmark feed applies."""
from __future__ import annotations

IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)


def uint8_affine() -> tuple[tuple[float, ...], tuple[float, ...]]:
    """Per-channel (scale, shift) with x * scale + shift == (x / 255 - mean) / std for uint8 x."""
    scale = tuple(1.0 / (255.0 * s) for s in IMAGENET_STD)
    shift = tuple(-m / s for m, s in zip(IMAGENET_MEAN, IMAGENET_STD))
    return scale, shift
