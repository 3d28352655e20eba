"""Random-resized-crop and flip of a packed batch, on the device, in batched gathers over chunks of
the batch whose temporary memory is bounded.

Bilinear sampling with half-pixel centres (PyTorch's `align_corners=False`), without
antialiasing: random-resized crops of 256 px images are mostly upscaled, and at most
about 1.5x downscaled, where antialiasing changes little.

Memory: one gather of the whole batch with int64 indices per value took about 1 GB of
temporaries at B=256 and 224 px (indices alone: 308 MB per corner), enough to push a model on a
16-24 GB GPU into OOM. Now indices are int32 per pixel (its 3 bytes gathered as one row of an
overlapping view), the interpolation runs in place, and the batch is cut into chunks whose
temporaries stay within `GATHER_BYTES`: 10 chunks of 27 images at B=256, 224 px
(docs/decisions/0006-gpu-augment-true-changes-what-a-slot.md).
"""
from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import torch

GATHER_BYTES = 64 << 20  # temporaries of one chunk, at most
# bytes of temporaries per output pixel: three float32 RGB values live at once (two corners and
# their interpolation), an int32 index and a gathered uint8 RGB corner (43), rounded up for the
# batch's row and column tables beside them
BYTES_PER_PIXEL = 48


def chunk_images(side: int, budget: int = GATHER_BYTES) -> int:
    """Images per chunk whose temporaries stay within `budget` (at least one)."""
    return max(1, budget // (side * side * BYTES_PER_PIXEL))


def crop_resize_chunks(data: Any, meta: dict[str, Any], side: int,
                       budget: int = GATHER_BYTES) -> Iterator[tuple[slice, Any]]:
    """The batch's crops as (rows, (rows' count, side, side, 3) float32 pixels, 0-255), chunk by
    chunk, cut from packed uint8 `data` (flat, on the device). A chunk's temporaries stay within
    `budget`; write each chunk where it goes before asking for the next.

    `meta` holds device tensors: offset (B,) int64, height and width (B,) int64, box (B, 4)
    float32 (left, top, right, bottom in stored pixels), flip (B,) bool.
    """
    index_dtype = torch.int32 if data.numel() < 2 ** 31 else torch.int64
    pixels = data.as_strided((max(0, data.numel() - 2), 3), (1, 1))  # row k: the 3 bytes from k on
    grid = torch.arange(side, device=data.device, dtype=torch.float32) + 0.5  # output pixel centres
    left, top, right, bottom = meta["box"].unbind(1)
    xs = left[:, None] + grid[None, :] * ((right - left) / side)[:, None] - 0.5  # (B, side) source x
    ys = top[:, None] + grid[None, :] * ((bottom - top) / side)[:, None] - 0.5
    xs = torch.where(meta["flip"][:, None], xs.flip(1), xs)
    x0, x1, wx = _neighbours(xs, meta["width"], index_dtype)
    y0, y1, wy = _neighbours(ys, meta["height"], index_dtype)
    rows_at = meta["offset"].to(index_dtype)[:, None]  # the first byte of each image
    row_bytes = (meta["width"] * 3).to(index_dtype)[:, None]
    step = chunk_images(side, budget)
    for start in range(0, len(xs), step):
        k = slice(start, min(len(xs), start + step))
        rows = (rows_at[k] + y0[k] * row_bytes[k], rows_at[k] + y1[k] * row_bytes[k])  # source rows' first bytes
        yield k, _bilinear(pixels, rows, (x0[k] * 3, x1[k] * 3), wx[k], wy[k])


def _bilinear(pixels: Any, rows: tuple[Any, Any], columns: tuple[Any, Any], wx: Any, wy: Any) -> Any:
    """(m, side, side, 3) float32: each output pixel interpolated from its four neighbours, in place
    (its own function: nothing of one chunk is held while the next is made)."""
    weight_x = wx[:, None, :, None]
    upper = _corner(pixels, rows[0], columns[0]).lerp_(_corner(pixels, rows[0], columns[1]), weight_x)
    lower = _corner(pixels, rows[1], columns[0]).lerp_(_corner(pixels, rows[1], columns[1]), weight_x)
    return upper.lerp_(lower, wy[:, :, None, None])


def _corner(pixels: Any, row_starts: Any, columns: Any) -> Any:
    """(m, side, side, 3) float32: the pixel at each (row start + column) byte, gathered as rows of 3."""
    m, side = row_starts.shape
    index = (row_starts[:, :, None] + columns[:, None, :]).view(-1)
    return torch.index_select(pixels, 0, index).view(m, side, side, 3).float()


def _neighbours(coords: Any, limit: Any, index_dtype: Any) -> tuple[Any, Any, Any]:
    """Integer neighbours (clamped to the image) and the weight of the second, per coordinate."""
    high = (limit[:, None] - 1).float()
    coords = coords.clamp(min=0.0).minimum(high)
    first = coords.floor()
    weight = coords - first
    second = torch.minimum(first + 1, high)
    return first.to(index_dtype), second.to(index_dtype), weight
