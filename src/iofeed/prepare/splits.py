"""Deterministic train/val split and write order, from the seed alone."""
from __future__ import annotations

import numpy as np

from ..errors import OptionError

DEFAULT_VAL_FRACTION = 0.1


def validation_mask(
    labels: np.ndarray,
    seed: int,
    val_per_class: int | None = None,
    val_fraction: float | None = None,
) -> np.ndarray:
    """Boolean mask of samples assigned to validation, chosen per class by `seed`.

    `val_per_class` takes N images of every class (at most all but one); otherwise
    `val_fraction` of each class (default 0.1), rounded, at least one from classes of two or more
    and at most all but one, except that 1 takes every image (a source that is all one split, as
    ImageNet's validation images) and 0 none.
    """
    if val_per_class is not None and val_fraction is not None:
        raise OptionError("give either --val-per-class or --val-fraction, not both")
    if val_per_class is not None and val_per_class < 0:
        raise OptionError(f"--val-per-class must be >= 0, got {val_per_class}")
    fraction = DEFAULT_VAL_FRACTION if val_fraction is None else val_fraction
    if not 0.0 <= fraction <= 1.0:
        raise OptionError(f"--val-fraction must be in [0, 1] (1: every image is validation), got {fraction}")
    labels = np.asarray(labels)
    mask = np.zeros(len(labels), dtype=bool)
    for label in np.unique(labels):
        members = np.flatnonzero(labels == label)
        rng = np.random.default_rng([seed, int(label)])
        chosen = rng.permutation(members)
        if val_per_class is not None:
            count = min(val_per_class, max(len(members) - 1, 0))
        elif fraction == 1.0:
            count = len(members)
        elif fraction > 0 and len(members) > 1:
            count = min(max(1, int(round(fraction * len(members)))), len(members) - 1)
        else:
            count = 0
        mask[chosen[:count]] = True
    return mask


def write_order(indices: np.ndarray, seed: int, shuffle: bool) -> np.ndarray:
    """The order samples are written to shards: shuffled by `seed` for training, kept otherwise."""
    indices = np.asarray(indices)
    if not shuffle:
        return indices
    return np.random.default_rng([seed, 0x5EED]).permutation(indices)
