"""Pixel agreement of two engines on the same samples, boxes and flips: the level differences of
every delivered value (uint8, numpy framework), and their summary."""
from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

import iofeed


def epoch_images(source: Path | str, engine: str, batches: int, **options: Any) -> tuple[np.ndarray, np.ndarray]:
    """(sample indices, uint8 NHWC images) of the first `batches` batches of epoch 0 of `engine`."""
    indices, images = [], []
    with iofeed.loader(source, engine=engine, framework="numpy", **options) as ld:
        for k, (batch, _) in enumerate(ld, start=1):
            indices.append(ld.last_indices.copy())
            images.append(np.array(batch))
            if k == batches:
                break
    return np.concatenate(indices), np.concatenate(images)


def level_differences(source: Path | str, other: str, batches: int, **options: Any) -> np.ndarray:
    """|`other` - workers| of every value of the first `batches` batches (int16); the two engines
    must deliver the same samples in the same order."""
    reference, theirs = (epoch_images(source, engine, batches, **options) for engine in ("workers", other))
    assert np.array_equal(reference[0], theirs[0]), "the engines delivered other samples"
    return np.abs(reference[1].astype(np.int16) - theirs[1].astype(np.int16))


def summary(diff: np.ndarray) -> dict[str, float]:
    """Mean, 99th percentile and max level difference; shares of values equal and within 2 levels;
    the largest mean difference of one image."""
    per_image = diff.reshape(len(diff), -1).mean(axis=1) if diff.ndim > 1 else diff
    return {"images": len(diff), "mean": float(diff.mean()), "p99": float(np.percentile(diff, 99)),
            "max": int(diff.max()), "equal": float((diff == 0).mean()), "within_2": float((diff <= 2).mean()),
            "worst_image_mean": float(per_image.max())}
