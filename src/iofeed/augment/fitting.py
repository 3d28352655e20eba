"""Detection training geometry that keeps the whole image's aspect ratio (`Recipe(fit=...)`): scale
by a jittered factor, cut a random window of the square canvas where the image is larger, pad
where it is smaller, flip the canvas.

Drawn per sample from the batch key's generator, so the same for any worker count and on resume.
The window is cut at whole stored pixels (as `fit="crop"` cuts), and what was cut is recorded:
the boxes follow it exactly (`box_geometry.move_boxes(placed=...)`)."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..image.boxes import Box
from ..image.mask_rows import RowRuns
from ..image.masks import crop_resize_nearest

FITS = ("crop", "letterbox", "pad", "shorter_side")
CENTRED = ("letterbox",)  # YOLO pads both sides alike; torchvision and DETR pad right and bottom
Rect = tuple[int, int, int, int]  # left, top, right, bottom in canvas pixels


@dataclass(frozen=True)
class Placement:
    """Where one image went: `box` of the stored image (whole pixels) resized into `placed`
    (canvas pixels, before the flip), then the canvas mirrored if `flip`."""

    box: Box
    placed: Rect
    flip: bool

    def drawn(self, side: int) -> Rect:
        """`placed` as it lies in the delivered canvas (mirrored with the flip)."""
        left, top, right, bottom = self.placed
        return (side - right, top, side - left, bottom) if self.flip else self.placed


def resized_size(width: int, height: int, side: int, fit: str, factor: float) -> tuple[int, int]:
    """(height, width) the whole image is scaled to, truncated to whole pixels: the longer side to
    `side` x `factor` (torchvision's `ScaleJitter`), or with `shorter_side` the shorter to that
    many whole pixels (`RandomShortestSize`, whose sizes are ints)."""
    if fit == "shorter_side":
        r = max(1, round(side * factor)) / min(width, height)
    else:
        r = side * factor / max(width, height)
    return max(1, int(height * r)), max(1, int(width * r))


def place(width: int, height: int, side: int, fit: str, jitter: tuple[float, float], flip: bool,
          uniforms: np.ndarray) -> Placement:
    """The placement of a `width` x `height` image on a `side` square, from four U[0, 1) draws:
    the scale factor, the window's left and top, the flip (mirrored below 0.5 when `flip`)."""
    u = [float(v) for v in uniforms]
    out_h, out_w = resized_size(width, height, side, fit, jitter[0] + u[0] * (jitter[1] - jitter[0]))
    sx, sy = out_w / width, out_h / height
    cut_w, cut_h = min(out_w, side), min(out_h, side)
    left = min(int(u[1] * (out_w - cut_w + 1)), out_w - cut_w)
    top = min(int(u[2] * (out_h - cut_h + 1)), out_h - cut_h)
    # the window in stored pixels, cut at whole pixels (at least one)
    x0, y0 = min(round(left / sx), width - 1), min(round(top / sy), height - 1)
    x1, y1 = max(min(round((left + cut_w) / sx), width), x0 + 1), max(min(round((top + cut_h) / sy), height), y0 + 1)
    at_x, at_y = ((side - cut_w) // 2, (side - cut_h) // 2) if fit in CENTRED else (0, 0)
    return Placement((float(x0), float(y0), float(x1), float(y1)), (at_x, at_y, at_x + cut_w, at_y + cut_h),
                     bool(flip and u[3] < 0.5))


def draw(width: int, height: int, side: int, fit: str, jitter: tuple[float, float], flip: bool,
         rng: np.random.Generator) -> Placement:
    """`place` with its four draws taken from `rng` (the batch key's, sample by sample)."""
    return place(width, height, side, fit, jitter, flip, rng.random(4))


def fill_outside(canvas: np.ndarray, rect: Rect, value: int | tuple[int, ...]) -> None:
    """Set `canvas` ((H, W) or (H, W, C)) to `value` outside `rect`."""
    left, top, right, bottom = rect
    canvas[:top], canvas[bottom:] = value, value
    canvas[top:bottom, :left], canvas[top:bottom, right:] = value, value


def render_mask(ids: np.ndarray | RowRuns, placement: Placement, as_cut: Box, canvas: np.ndarray, pad: int = 0) -> None:
    """An id map's share of `placement` into `canvas` (side, side): the cut `as_cut` box resized
    nearest-neighbour into the placed rectangle (mirrored with the flip), `pad` elsewhere."""
    rect = placement.drawn(canvas.shape[1])
    fill_outside(canvas, rect, pad)
    left, top, right, bottom = rect
    canvas[top:bottom, left:right] = crop_resize_nearest(ids, as_cut, placement.flip, (bottom - top, right - left))


def pad_semantic(masks: np.ndarray, placed: np.ndarray, flips: np.ndarray, ignore: int) -> None:
    """Semantic maps (n, side, side) set to `ignore` outside each image's placed rectangle (the
    workers pad with 0, a class id in a semantic map)."""
    side = masks.shape[2]
    for i, (rect, flip) in enumerate(zip(placed.astype(np.int64).tolist(), flips.tolist())):
        fill_outside(masks[i], Placement((0.0, 0.0, 0.0, 0.0), (rect[0], rect[1], rect[2], rect[3]),
                                         bool(flip)).drawn(side), ignore)
