"""Slots for `Output(target="boxes")` / `"masks"`: the augmented images, each image's crop and flip as the
worker cut them (the boxes follow them in the main process, one vectorised step per batch), and
with masks each image's instance-id map cropped, resized nearest-neighbour and flipped alike.

Evaluation (`Augment.letterbox`) resizes the whole image to fit the side, its aspect kept, and
pads right and bottom with zeros: the crop is then the whole image and the scale is recorded.
Training with `Recipe(fit=...)` places each image on the canvas (`fitted.py`) and records where."""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from ...augment.box_geometry import letterbox_shape
from ...image.boxes import Augment
from ...image.masks import crop_resize_nearest
from ...sources.box_targets import read_mask
from ...sources.sample_reader import SampleReader
from ...sources.samples import SampleSource
from .decode import load_augmented
from .fitted import write_fitted

GEOMETRY = 9  # left, top, right, bottom (stored pixels), flip, the placed rectangle (canvas pixels, before the flip)


@dataclass
class Geometry:
    """A batch's crops, flips and (with masks) instance-id maps, copied out of the slot."""

    crops: np.ndarray  # float32 (n, 4)
    flips: np.ndarray  # bool (n,)
    masks: np.ndarray | None  # uint8 (n, side, side)
    placed: np.ndarray | None = None  # float32 (n, 4): where each crop went on the canvas, before the flip


@dataclass(frozen=True)
class TargetLayout:
    """Slots of augmented images [slot, i, y, x, c] uint8, geometry [slot, i, 5] float32, masks
    [slot, i, y, x] uint8 (when `masks`), and labels, in one shared block."""

    slots: int
    batch_size: int
    side: int
    masks: bool

    @property
    def _parts(self) -> list[tuple[tuple[int, ...], np.dtype[Any]]]:
        per: list[tuple[tuple[int, ...], np.dtype[Any]]] = [((self.side, self.side, 3), np.dtype(np.uint8)),
                                                             ((GEOMETRY,), np.dtype(np.float32))]
        if self.masks:
            per.append(((self.side, self.side), np.dtype(np.uint8)))
        return [((self.slots, self.batch_size, *shape), dtype) for shape, dtype in per]

    @staticmethod
    def _aligned(n: int) -> int:
        return -(-n // 8) * 8

    @property
    def total_bytes(self) -> int:
        parts = sum(self._aligned(int(np.prod(shape)) * dtype.itemsize) for shape, dtype in self._parts)
        return parts + self.slots * self.batch_size * 8

    def views(self, buffer: memoryview) -> tuple[tuple[np.ndarray, ...], np.ndarray]:
        """((images, geometry[, masks]), labels[slot, i] int64) over `buffer`."""
        arrays, at = [], 0
        for shape, dtype in self._parts:
            arrays.append(np.ndarray(shape, dtype, buffer, offset=at))
            at += self._aligned(int(np.prod(shape)) * dtype.itemsize)
        return tuple(arrays), np.ndarray((self.slots, self.batch_size), np.int64, buffer, offset=at)

    @staticmethod
    def slot(payload: tuple[np.ndarray, ...], slot: int) -> tuple[np.ndarray, ...]:
        return tuple(part[slot] for part in payload)

    @staticmethod
    def write(slot_payload: tuple[np.ndarray, ...], k: int, reader: SampleReader, source: SampleSource, index: int,
              augment: Augment, rng: np.random.Generator) -> None:
        """Sample `index` into image `k`, its crop and flip recorded, its mask cut alike. Raises SampleError."""
        images, geometry = slot_payload[0], slot_payload[1]
        out = images[k]
        if augment.fitted:
            mask = slot_payload[2][k] if len(slot_payload) > 2 else None
            box, flip, placed = write_fitted(out, mask, reader, source, index, augment, rng)
            geometry[k] = (*box, float(flip), *placed)
            return
        if augment.letterbox:
            height, width = letterbox_shape(int(source.width[index]), int(source.height[index]), augment.size)
            out[height:], out[:height, width:] = 0, 0
            out = out[:height, :width]
        box, flip = load_augmented(reader, source, index, augment, rng, out)
        geometry[k] = (*box, float(flip), 0, 0, out.shape[1], out.shape[0])
        if len(slot_payload) > 2:
            ids = read_mask(reader, source, index)
            mask = slot_payload[2][k]
            mask[...] = 0
            mask[:out.shape[0], :out.shape[1]] = crop_resize_nearest(ids, box, flip, out.shape[:2])

    @staticmethod
    def images(slot_payload: tuple[np.ndarray, ...], n: int,
               wrap: Callable[[np.ndarray], np.ndarray] = np.asarray) -> np.ndarray:
        """The first `n` images of a slot, for the consumer: a view, `wrap`ped (leased)."""
        return wrap(slot_payload[0][:n])

    @staticmethod
    def geometry(slot_payload: Any, n: int) -> Geometry | None:
        """The first `n` images' crops, flips and masks, copied (small next to the images)."""
        if not isinstance(slot_payload, tuple) or len(slot_payload) < 2 or slot_payload[1].ndim != 2:
            return None
        geometry = slot_payload[1][:n]
        masks = slot_payload[2][:n].copy() if len(slot_payload) > 2 else None
        return Geometry(geometry[:, :4].copy(), geometry[:, 4] > 0.5, masks, geometry[:, 5:9].copy())
