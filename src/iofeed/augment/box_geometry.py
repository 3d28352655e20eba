"""Boxes moved with the pixels: the crop, resize and flip each image of a batch had (recorded by
the workers as they drew them from the batch key), applied to every box of the batch at once in
vectorised numpy.

Crop: boxes are clipped to the crop; a box left with less than `min_visible` of its area (or none)
is dropped and counted. Resize: boxes scale with the crop's side ratios. Flip: x mirrored. A
letterboxed image (evaluation: resized whole, padded right and bottom) records its scale, and
`to_original` maps output boxes back to the image the annotations were made on."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

MIN_VISIBLE = 0.25  # default share of a box's area that must stay inside the crop (`Recipe.min_visible`)


@dataclass
class MovedBoxes:
    """A batch's boxes in output pixels: `boxes[offsets[i]:offsets[i + 1]]` are image i's, with
    `source[k]`, each kept box's position in its sample's stored list (its instance id - 1)."""

    boxes: np.ndarray  # float32 (m, 4) xyxy
    offsets: np.ndarray  # int64 (batch + 1,)
    source: np.ndarray  # int64 (m,) index into the sample's stored boxes
    kept: np.ndarray  # int64 (m,) index into the boxes given
    dropped: int  # boxes dropped by the visibility rule


def move_boxes(boxes: np.ndarray, counts: np.ndarray, crops: np.ndarray, flips: np.ndarray, size: tuple[int, int],
               min_visible: float = MIN_VISIBLE, scales: np.ndarray | None = None,
               placed: np.ndarray | None = None) -> MovedBoxes:
    """Boxes (m, 4) xyxy in stored pixels, `counts[i]` of them image i's (in order), through each
    image's crop (`crops` (n, 4) left, top, right, bottom in stored pixels) resized to `size`
    (height, width) and mirrored where `flips`. With `scales` (n, 2: x, y), an image was resized
    whole by them without crop (letterbox): nothing is clipped away but the image's own edges.
    With `placed` (n, 4: left, top, right, bottom in output pixels, before the flip), each crop was
    resized into that rectangle of the canvas (`Recipe(fit=...)`, `augment/fitting.py`)."""
    n = len(counts)
    owner = np.repeat(np.arange(n), counts)
    b = np.asarray(boxes, np.float64).reshape(-1, 4)
    c = np.asarray(crops, np.float64).reshape(n, 4)[owner]
    lo, hi = c[:, [0, 1, 0, 1]], c[:, [2, 3, 2, 3]]
    clipped = np.clip(b, lo, hi)
    area = (b[:, 2] - b[:, 0]) * (b[:, 3] - b[:, 1])
    seen = np.maximum(clipped[:, 2] - clipped[:, 0], 0) * np.maximum(clipped[:, 3] - clipped[:, 1], 0)
    keep = (seen > 0) & (seen >= min_visible * area)
    height, width = size
    shift: np.ndarray | float = 0.0
    if placed is not None:
        p = np.asarray(placed, np.float64).reshape(n, 4)[owner]
        sx = (p[:, 2] - p[:, 0]) / np.maximum(c[:, 2] - c[:, 0], 1e-9)
        sy = (p[:, 3] - p[:, 1]) / np.maximum(c[:, 3] - c[:, 1], 1e-9)
        shift = p[:, [0, 1, 0, 1]]
    elif scales is None:
        sx = width / np.maximum(c[:, 2] - c[:, 0], 1e-9)
        sy = height / np.maximum(c[:, 3] - c[:, 1], 1e-9)
    else:
        sx, sy = np.asarray(scales, np.float64)[owner, 0], np.asarray(scales, np.float64)[owner, 1]
    out = (clipped - lo) * np.stack([sx, sy, sx, sy], 1) + shift
    flipped = np.asarray(flips, bool)[owner]
    out[flipped, 0], out[flipped, 2] = width - out[flipped, 2], width - out[flipped, 0]
    kept_owner = owner[keep]
    offsets = np.zeros(n + 1, np.int64)
    offsets[1:] = np.cumsum(np.bincount(kept_owner, minlength=n))
    first = np.zeros(n + 1, np.int64)
    first[1:] = np.cumsum(counts)
    source = np.flatnonzero(keep) - first[kept_owner]
    return MovedBoxes(out[keep].astype(np.float32), offsets, source.astype(np.int64), np.flatnonzero(keep),
                      int((~keep).sum()))


def letterbox_shape(width: int, height: int, side: int) -> tuple[int, int]:
    """(height, width) of an image resized whole to fit `side` x `side`, its aspect kept."""
    scale = side / max(width, height)
    return max(1, round(height * scale)), max(1, round(width * scale))


def letterbox_scales(crops: np.ndarray, side: int) -> tuple[np.ndarray, np.ndarray]:
    """Per letterboxed image (its crop the whole stored image, `crops` (n, 4)): its (x, y) scale,
    output pixels per stored pixel, and its output (width, height), both (n, 2) float64."""
    stored = np.asarray(crops, np.float64).reshape(-1, 4)[:, 2:4]
    shapes = np.array([letterbox_shape(int(round(w)), int(round(h)), side) for w, h in stored],
                      np.float64).reshape(-1, 2)[:, ::-1]
    return shapes / np.maximum(stored, 1e-9), shapes


def to_original(boxes: np.ndarray, scale: np.ndarray) -> np.ndarray:
    """Output boxes (m, 4) of a letterboxed image back in the annotated image's pixels, by its
    recorded `scale` (x, y: output pixels per annotated pixel)."""
    sx, sy = float(scale[0]), float(scale[1])
    return (np.asarray(boxes, np.float64) / [sx, sy, sx, sy]).astype(np.float32)
