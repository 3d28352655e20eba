"""One training sample with `Recipe(fit=...)` into its slot: the placement drawn from the batch
key (`augment/fitting.py`), the drawn window decoded and resized into its rectangle of the
canvas, the rest filled; the instance-id map cut alike and padded with 0."""
from __future__ import annotations

import dataclasses

import numpy as np

from ...augment.fitting import draw, fill_outside, render_mask
from ...image.boxes import Augment, Box
from ...sources.box_targets import read_mask
from ...sources.sample_reader import SampleReader
from ...sources.samples import SampleSource
from .decode import load_augmented


def write_fitted(image: np.ndarray, mask: np.ndarray | None, reader: SampleReader, source: SampleSource, index: int,
                 augment: Augment, rng: np.random.Generator) -> tuple[Box, bool, tuple[int, int, int, int]]:
    """Sample `index` placed on `image` (side, side, 3) and its id map on `mask`; the crop as cut
    (stored pixels), the flip and the placed rectangle (before the flip). Raises SampleError."""
    width, height, side = int(source.width[index]), int(source.height[index]), augment.size
    placement = draw(width, height, side, augment.fit, augment.scale_jitter, augment.flip, rng)
    left, top, right, bottom = placement.drawn(side)
    fill_outside(image, (left, top, right, bottom), augment.fill)
    window = image[top:bottom, left:right]
    cutting = dataclasses.replace(augment, size=max(window.shape[:2]), fixed=(placement.box, placement.flip))
    if window.flags.c_contiguous:
        box, flip = load_augmented(reader, source, index, cutting, rng, window)
    else:  # a narrower window is strided in the slot: the resize kernels write contiguous arrays
        pixels = np.empty(window.shape, np.uint8)
        box, flip = load_augmented(reader, source, index, cutting, rng, pixels)
        window[...] = pixels
    if mask is not None:
        ids = read_mask(reader, source, index)
        render_mask(ids, placement, box, mask)
    return box, flip, placement.placed
