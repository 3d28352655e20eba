"""CPU decode for the loader: JPEG at the smallest DCT scale covering the crop (or only the crop's
region, `image/region.py`), or raw pixels sliced from a memory map; then crop+resize and flip."""
from __future__ import annotations

import math

import numpy as np

from ...format.table import RAW
from ...image import fastjpeg, region
from ...image.boxes import Augment, Box
from ...image.fastjpeg import decode_rgb_array, plain_jpeg_header
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
    return decode_augmented(reader.read(index), augment, rng, out, region_ok=checked_whole(source))


def decode_note(source: SampleSource, augment: Augment) -> list[str]:
    """Which JPEG decode the workers run, and why (for `stats.settings["decisions"]`); none for
    raw pixels."""
    if (source.encoding == RAW).all():
        return []
    if not fastjpeg.installed():
        return ["decode: the full image through Pillow: the libjpeg-turbo path needs simplejpeg: "
                "pip install 'iofeed[fast]'"]
    return [region.describe(augment.region_decode, checked_whole(source), augment.fast_decode)]


def checked_whole(source: SampleSource) -> bool:
    """Whether every image of `source` was decoded whole by `iofeed preprocess` (a region decode
    does not read past the crop, so it would deliver a file truncated below it)."""
    return source.kind == "dataset" and source.validated


def _as_cut(box: Box, sx: float, sy: float) -> Box:
    """`box` as the crop rounds it in pixels scaled by (sx, sy), back in stored pixels."""
    return (round(box[0] * sx) / sx, round(box[1] * sy) / sy, round(box[2] * sx) / sx, round(box[3] * sy) / sy)


def decode_augmented(data: bytes, augment: Augment, rng: np.random.Generator, out: np.ndarray,
                     region_ok: bool = False) -> tuple[Box, bool]:
    """Decode `data`, cut the box `augment` draws, resize to `out`'s size, flip, write into `out`;
    the crop as cut (stored pixels) and the flip.

    `out` is a (size, size, 3) uint8 array (a slot in shared memory). Plain JPEGs go through
    libjpeg-turbo directly when `simplejpeg` is installed (`fastjpeg`): with `region_ok` and
    `augment.region_decode`, only the crop's region when that pays (`region.worth_it`, the
    `region` extra; exact pixels), else the whole image (`augment.fast_decode`: fast IDCT)
    at the smallest DCT scale covering the crop; the rest through Pillow (EXIF orientation,
    CMYK, other formats). Raises SampleError.
    """
    plain = plain_jpeg_header(data)
    if plain is None:
        opened = open_image(data)
        width, height = opened.size
    else:
        opened = None
        width, height = plain[0], plain[1]
        check_pixels(width, height)
    box, flip = augment.box(width, height, rng)
    side = augment.size
    box_w, box_h = max(box[2] - box[0], 1e-6), max(box[3] - box[1], 1e-6)
    needed = (math.ceil(width * side / box_w), math.ceil(height * side / box_h))
    if plain is not None and region_ok and augment.region_decode:
        cropped = _region(data, box, needed, plain)
        if cropped is not None:
            crop_resize_into(cropped, (0, 0, cropped.shape[1], cropped.shape[0]), flip, out, augment.interpolation)
            return _as_cut(box, 1.0, 1.0), flip
    pixels = (decode_rgb_array(data, needed, augment.fast_decode) if opened is None
              else np.asarray(decode_rgb(opened, needed).image))
    sx, sy = pixels.shape[1] / width, pixels.shape[0] / height
    scaled = (box[0] * sx, box[1] * sy, box[2] * sx, box[3] * sy)
    crop_resize_into(pixels, scaled, flip, out, augment.interpolation)
    return _as_cut(box, sx, sy), flip


def _region(data: bytes, box: Box, needed: tuple[int, int], header: tuple[int, int, str]) -> np.ndarray | None:
    """The pixels of `box` by a region decode, or None where the full decode is the better
    choice: a DCT-scaled decode covers the crop (the region decoder does not scale), the region
    does not pay (`region.worth_it`), or the extra is missing."""
    width, height, subsampling = header
    if math.ceil(width * 7 / 8) >= needed[0] and math.ceil(height * 7 / 8) >= needed[1]:
        return None  # libjpeg-turbo would decode at 7/8 scale or less: cheaper than any region
    left, top, right, bottom = (int(round(v)) for v in box)  # the whole pixels `crop_resize_into` cuts
    if not (0 <= left < right <= width and 0 <= top < bottom <= height):
        return None
    if not region.worth_it((left, top, right, bottom), (width, height), subsampling):
        return None
    return region.decode_region(data, (left, top, right, bottom), (width, height), subsampling)
