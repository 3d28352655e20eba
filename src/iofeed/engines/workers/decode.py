"""CPU decode for the loader: JPEG at the smallest DCT scale covering the crop, or raw pixels
sliced from a memory map; then crop+resize and flip."""
from __future__ import annotations

import math

import numpy as np

from ...format.table import RAW
from ...image.boxes import Augment, Box
from ...image.fastjpeg import decode_rgb_array, plain_jpeg_size
from ...image.pil import check_pixels, decode_rgb, open_image
from ...image.resize import crop_resize_into
from ...sources.sample_reader import SampleReader
from ...sources.samples import SampleSource


def load_augmented(
    reader: SampleReader, source: SampleSource, index: int, augment: Augment, rng: np.random.Generator,
    out: np.ndarray,
) -> tuple[Box, bool]:
    """Sample `index`, augmented into `out`: raw pixels need no decode. Returns the crop (in
    stored pixels, as cut: rounded to whole pixels of what was decoded) and the flip. Raises SampleError."""
    if source.encoding[index] == RAW:
        pixels = reader.pixels(index)
        box, flip = augment.box(pixels.shape[1], pixels.shape[0], rng)
        crop_resize_into(pixels, box, flip, out, augment.interpolation)
        return _as_cut(box, 1.0, 1.0), flip
    return decode_augmented(reader.read(index), augment, rng, out)


def _as_cut(box: Box, sx: float, sy: float) -> Box:
    """`box` as the crop rounds it in pixels scaled by (sx, sy), back in stored pixels."""
    return (round(box[0] * sx) / sx, round(box[1] * sy) / sy, round(box[2] * sx) / sx, round(box[3] * sy) / sy)


def decode_augmented(data: bytes, augment: Augment, rng: np.random.Generator, out: np.ndarray) -> tuple[Box, bool]:
    """Decode `data`, cut the box `augment` draws, resize to `out`'s size, flip, write into `out`.

    `out` is a (size, size, 3) uint8 array (a slot in shared memory). Plain JPEGs go through
    libjpeg-turbo directly when `simplejpeg` is installed (`fastjpeg`), the rest through
    Pillow (EXIF orientation, CMYK, other formats). Raises SampleError.
    """
    plain = plain_jpeg_size(data)
    if plain is not None:
        check_pixels(*plain)
    opened = open_image(data) if plain is None else None
    width, height = plain or opened.size
    box, flip = augment.box(width, height, rng)
    side = augment.size
    box_w, box_h = max(box[2] - box[0], 1e-6), max(box[3] - box[1], 1e-6)
    needed = (math.ceil(width * side / box_w), math.ceil(height * side / box_h))
    pixels = decode_rgb_array(data, needed) if opened is None else np.asarray(decode_rgb(opened, needed).image)
    sx, sy = pixels.shape[1] / width, pixels.shape[0] / height
    scaled = (box[0] * sx, box[1] * sy, box[2] * sx, box[3] * sy)
    crop_resize_into(pixels, scaled, flip, out, augment.interpolation)
    return _as_cut(box, sx, sy), flip
