"""Instance masks as one uint8 instance-id map per image: COCO polygons and RLE decoded into it,
and its nearest-neighbour crop + resize (the same sampling as torch's `interpolate(mode="nearest")`,
which torchvision v2 uses for `tv_tensors.Mask`).

Pixel (x, y) is inside a polygon when its centre (x + 0.5, y + 0.5) is (even-odd rule), so a
rectangle with integer corners covers exactly the pixels of its box."""
from __future__ import annotations

import io

import numpy as np
from PIL import Image

from ..errors import SampleError
from .mask_rows import RowRuns, decode_rows

MAX_INSTANCES = 255  # ids 1..255 in a uint8 map; 0 is background


def polygon_mask(polygons: list[list[float]], height: int, width: int) -> np.ndarray:
    """(height, width) bool: the pixels whose centres lie inside `polygons` (COCO's flat
    [x1, y1, x2, y2, ...] lists), even-odd within each polygon, the polygons united."""
    out = np.zeros((height, width), bool)
    for flat in polygons:
        xy = np.asarray(flat, np.float64).reshape(-1, 2)
        if len(xy) < 3:
            continue
        x0, y0 = xy[:, 0], xy[:, 1]
        x1, y1 = np.roll(x0, -1), np.roll(y0, -1)
        rows = np.arange(height, dtype=np.float64)[:, None] + 0.5  # (H, 1) pixel-centre rows
        crosses = (y0 <= rows) != (y1 <= rows)  # (H, E): the edge spans this row's centre
        with np.errstate(divide="ignore", invalid="ignore"):
            xs = x0 + (rows - y0) * (x1 - x0) / (y1 - y0)
        r, e = np.nonzero(crosses)
        # pixel x is right of a crossing when x + 0.5 > xs: the first such column
        cols = np.clip(np.ceil(xs[r, e] - 0.5), 0, width).astype(np.int64)
        diff = np.zeros((height, width + 1), np.int32)
        np.add.at(diff, (r, cols), 1)
        out |= (np.cumsum(diff[:, :width], axis=1) & 1).astype(bool)
    return out


def rle_counts(counts: str | list[int]) -> np.ndarray:
    """An RLE's run lengths: a list as COCO's uncompressed form writes it, or the compressed
    string (pycocotools' 6-bit LEB128-like code, runs after the second as differences)."""
    if not isinstance(counts, str):
        return np.asarray(counts, np.int64)
    runs: list[int] = []
    pos = 0
    data = counts.encode("ascii")
    while pos < len(data):
        value, shift, more = 0, 0, True
        while more:
            c = data[pos] - 48
            value |= (c & 0x1F) << (5 * shift)
            more = bool(c & 0x20)
            pos, shift = pos + 1, shift + 1
            if not more and c & 0x10:
                value |= -1 << (5 * shift)
        if len(runs) > 2:
            value += runs[-2]
        runs.append(value)
    return np.asarray(runs, np.int64)


def rle_encode(mask: np.ndarray) -> str:
    """`mask` (H, W) as a compressed COCO RLE string (column-major runs, starting with zeros)."""
    flat = np.asarray(mask, bool).ravel(order="F")
    change = np.flatnonzero(np.diff(flat.astype(np.int8))) + 1
    bounds = np.concatenate([[0], change, [flat.size]])
    runs = np.diff(bounds).tolist()
    if flat.size and flat[0]:
        runs = [0, *runs]
    out = bytearray()
    for i, run in enumerate(runs):
        value = run - runs[i - 2] if i > 2 else run
        more = True
        while more:
            c = value & 0x1F
            value >>= 5
            more = (value != -1) if c & 0x10 else (value != 0)
            out.append((c | 0x20 if more else c) + 48)
    return out.decode("ascii")


def rle_mask(counts: str | list[int], height: int, width: int) -> np.ndarray:
    """(height, width) bool from an RLE; SampleError when its runs do not cover the image."""
    runs = rle_counts(counts)
    if (runs < 0).any() or int(runs.sum()) != height * width:
        raise SampleError(f"RLE runs cover {int(runs.sum())} pixels, the mask {height}x{width} has {height * width}")
    values = np.zeros(len(runs), bool)
    values[1::2] = True
    return np.repeat(values, runs).reshape((height, width), order="F")


def nearest_indices(size_in: int, size_out: int, start: float = 0.0, span: float | None = None) -> np.ndarray:
    """Source indices of `size_out` output pixels resampling `span` input pixels from `start`
    (torch's "nearest": floor(i * scale) with a float32 scale), clipped into the input."""
    span = float(size_in if span is None else span)
    scale = np.float32(span / size_out)
    index = np.floor(np.arange(size_out, dtype=np.float32) * scale).astype(np.int64) + int(round(start))
    clipped: np.ndarray = np.clip(index, 0, size_in - 1)
    return clipped


def crop_resize_nearest(ids: np.ndarray | RowRuns, box: tuple[float, float, float, float], flip: bool,
                        size: tuple[int, int]) -> np.ndarray:
    """`box` (left, top, right, bottom, rounded to whole pixels as the image crop is) of an
    instance-id map, resized to `size` (height, width) nearest-neighbour, mirrored if `flip`.
    From stored row runs no row is expanded whole (`RowRuns.sample`)."""
    left, top, right, bottom = (int(round(v)) for v in box)
    rows = nearest_indices(ids.shape[0], size[0], top, bottom - top)
    cols = nearest_indices(ids.shape[1], size[1], left, right - left)
    if isinstance(ids, RowRuns):
        out = ids.sample(rows, cols)  # the columns ascend: nearest_indices floors an increasing ramp
    else:
        out = np.take(np.take(ids, rows, axis=0), cols, axis=1)  # two 1-D takes: ~5x a 2-D fancy index's speed
    return out[:, ::-1] if flip else out


MASK_FORMS = ("png", "rows")  # a dataset's stored id maps: PNG label maps (before 0165), row runs


def decode_mask(data: bytes, form: str, width: int, height: int) -> np.ndarray | RowRuns:
    """A stored id map in `form` (of `MASK_FORMS`), ready for `crop_resize_nearest`; SampleError
    when it is unreadable or not of the image's size."""
    return decode_rows(data, width, height) if form == "rows" else decode_png(data, width, height)


def encode_png(ids: np.ndarray) -> bytes:
    """A uint8 instance-id map as a greyscale PNG (lossless; a WebDataset `png` member)."""
    buf = io.BytesIO()
    Image.fromarray(np.ascontiguousarray(ids, np.uint8), "L").save(buf, "PNG", compress_level=1)
    return buf.getvalue()


def decode_png(data: bytes, width: int, height: int) -> np.ndarray:
    """A stored instance-id map; SampleError when it is not a greyscale PNG of the image's size."""
    try:
        image = Image.open(io.BytesIO(data))
        image.load()
    except (OSError, ValueError) as exc:
        raise SampleError(f"unreadable instance mask ({exc})") from None
    if image.mode != "L" or image.size != (width, height):
        raise SampleError(f"instance mask is {image.mode} {image.size[0]}x{image.size[1]}, the image {width}x{height}")
    return np.asarray(image)
