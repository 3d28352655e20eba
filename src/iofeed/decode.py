"""CPU decode for the loader: JPEG at the smallest DCT scale covering the crop, crop+resize, flip."""
from __future__ import annotations

import math

import numpy as np

from .augment import Augment
from .imaging import decode_rgb, open_image
from .resize import crop_resize_into


def decode_augmented(data: bytes, augment: Augment, rng: np.random.Generator, out: np.ndarray) -> None:
    """Decode `data`, cut the box `augment` draws, resize to `out`'s size, flip, write into `out`.

    `out` is a (size, size, 3) uint8 array (a slot in shared memory). Raises SampleError.
    """
    opened = open_image(data)
    width, height = opened.size
    box, flip = augment.box(width, height, rng)
    side = augment.size
    box_w, box_h = max(box[2] - box[0], 1e-6), max(box[3] - box[1], 1e-6)
    needed = (math.ceil(width * side / box_w), math.ceil(height * side / box_h))
    image = decode_rgb(opened, min_size=needed).image
    sx, sy = image.width / width, image.height / height
    scaled = (box[0] * sx, box[1] * sy, box[2] * sx, box[3] * sy)
    crop_resize_into(np.asarray(image), scaled, flip, out)
