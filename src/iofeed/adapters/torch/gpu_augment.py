"""Random-resized-crop and flip of a packed batch, on the device, in one batched gather.

Bilinear sampling with half-pixel centres (PyTorch's `align_corners=False`), without
antialiasing: random-resized crops of 256 px images are mostly upscaled, and at most
about 1.5x downscaled, where antialiasing changes little.
"""
from __future__ import annotations

from typing import Any

import torch


def crop_resize_packed(data: Any, meta: dict[str, Any], side: int) -> Any:
    """(B, side, side, 3) float32 pixels (0–255) cut from packed uint8 `data` (flat, on the device).

    `meta` holds device tensors: offset (B,) int64, height and width (B,) int64, box (B, 4)
    float32 (left, top, right, bottom in stored pixels), flip (B,) bool.
    """
    device = data.device
    grid = torch.arange(side, device=device, dtype=torch.float32) + 0.5  # output pixel centres
    box = meta["box"]
    left, top, right, bottom = box.unbind(1)
    scale_x = ((right - left) / side)[:, None]
    scale_y = ((bottom - top) / side)[:, None]
    xs = left[:, None] + grid[None, :] * scale_x - 0.5  # (B, side) source x of each output column
    ys = top[:, None] + grid[None, :] * scale_y - 0.5
    xs = torch.where(meta["flip"][:, None], xs.flip(1), xs)
    x0, x1, wx = _neighbours(xs, meta["width"])
    y0, y1, wy = _neighbours(ys, meta["height"])
    row = meta["width"][:, None] * 3  # bytes per stored row, per sample
    base = meta["offset"][:, None, None, None]
    channel = torch.arange(3, device=device)[None, None, None, :]

    def take(y: Any, x: Any) -> Any:
        index = base + (y * row)[:, :, None, None] + (x * 3)[:, None, :, None] + channel
        return data[index].float()

    wx = wx[:, None, :, None]
    wy = wy[:, :, None, None]
    top_row = take(y0, x0) * (1 - wx) + take(y0, x1) * wx
    bottom_row = take(y1, x0) * (1 - wx) + take(y1, x1) * wx
    return top_row * (1 - wy) + bottom_row * wy


def _neighbours(coords: Any, limit: Any) -> tuple[Any, Any, Any]:
    """Integer neighbours (clamped to the image) and the weight of the second, per coordinate."""
    high = (limit[:, None] - 1).float()
    coords = coords.clamp(min=0.0).minimum(high)
    first = coords.floor()
    weight = coords - first
    first = first.long()
    second = torch.minimum(first + 1, limit[:, None] - 1)
    return first, second, weight
