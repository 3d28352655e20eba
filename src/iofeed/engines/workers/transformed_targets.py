"""Slots for `transform=` with `Output(target="boxes")` / "masks": each sample is cut by the recipe
as `TargetLayout` cuts it, its stored boxes moved through that crop and flip here (one sample's
`move_boxes`), then the user's transform takes and returns image, boxes, labels (and instance
mask) in the worker (`augment.target_transforms`). The results are written per image into fixed
regions of the slot: up to `capacity` boxes, their labels and counts, the mask, so that a batch's
targets cross to the consumer in shared memory, and leave the slot as a few flat arrays."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from ...augment.box_geometry import letterbox_scales, move_boxes
from ...augment.target_transforms import PackedTargets, SampleTargets
from ...errors import WorkerError
from ...image.boxes import Augment
from ...sources.sample_reader import SampleReader
from ...sources.samples import SampleSource
from .target_slots import GEOMETRY, TargetLayout

COUNTS = 3  # per image: boxes returned, dropped by the recipe's crop, dropped by the transform


@dataclass(frozen=True)
class TransformedTargetLayout(TargetLayout):
    """Slots of transformed images [slot, i, *shape] (the transform's fixed shape and dtype),
    boxes [slot, i, capacity, 4] float32, their labels [slot, i, capacity] int64, counts
    [slot, i, COUNTS] int64, masks [slot, i, H, W] uint8 (when `masks`), and class labels."""

    shape: tuple[int, ...] = ()
    dtype: str = "|u1"
    capacity: int = 1  # boxes per image at most: the most any stored sample has
    min_visible: float = 0.25

    @property
    def _parts(self) -> list[tuple[tuple[int, ...], np.dtype[Any]]]:
        per: list[tuple[tuple[int, ...], np.dtype[Any]]] = [
            (self.shape, np.dtype(self.dtype)), ((self.capacity, 4), np.dtype(np.float32)),
            ((self.capacity,), np.dtype(np.int64)), ((COUNTS,), np.dtype(np.int64))]
        if self.masks:
            per.append((self.shape[:2], np.dtype(np.uint8)))
        return [((self.slots, self.batch_size, *shape), dtype) for shape, dtype in per]

    def prepared(self, reader: SampleReader, source: SampleSource, index: int, augment: Augment,
                 rng: np.random.Generator) -> tuple[np.ndarray, SampleTargets, int]:
        """Sample `index` cut by the recipe, its boxes (and mask) moved alike: (image, targets,
        boxes the crop dropped). Raises SampleError."""
        side = self.side
        scratch = (np.empty((1, side, side, 3), np.uint8), np.empty((1, GEOMETRY), np.float32),
                   *((np.empty((1, side, side), np.uint8),) if self.masks else ()))
        TargetLayout.write(scratch, 0, reader, source, index, augment, rng)
        table = source.boxes
        assert table is not None, "transform= with Output(target='boxes') hands the workers the split's boxes"
        lo, hi = int(table.offsets[index]), int(table.offsets[index + 1])
        crop, flip = scratch[1][:, :4], scratch[1][:, 4] > 0.5
        scales = letterbox_scales(crop, side)[0] if augment.letterbox else None
        placed = scratch[1][:, 5:9] if augment.fitted else None
        moved = move_boxes(table.boxes[lo:hi], np.array([hi - lo]), crop, flip, (side, side), self.min_visible,
                           scales, placed)
        mask = None
        if self.masks:
            renumber = np.zeros(256, np.uint8)
            renumber[moved.source + 1] = np.arange(1, len(moved.source) + 1)
            mask = renumber[scratch[2][0]]
        return scratch[0][0], SampleTargets(moved.boxes, table.labels[lo:hi][moved.kept], mask), moved.dropped

    def put(self, slot_payload: tuple[np.ndarray, ...], k: int, image: np.ndarray, targets: SampleTargets,
            given: int, dropped: int, path: str) -> None:
        """The transform's output for image `k`; WorkerError when it returned more boxes than fit."""
        count = len(targets.labels)
        if count > self.capacity:
            raise WorkerError(f"{path}: the transform returned {count} boxes for {given}; a transform may drop boxes "
                              f"but not add more than the most any sample holds ({self.capacity})")
        slot_payload[0][k] = image
        slot_payload[1][k, :count] = targets.boxes
        slot_payload[2][k, :count] = targets.labels
        slot_payload[3][k] = (count, dropped, max(given - count, 0))
        if self.masks:
            assert targets.mask is not None, "checked by the transform's runner"
            slot_payload[4][k] = targets.mask

    @staticmethod
    def geometry(slot_payload: Any, n: int) -> None:
        """None: the boxes were moved in the worker (see `packed`)."""
        return None

    @staticmethod
    def packed(slot_payload: tuple[np.ndarray, ...], n: int) -> PackedTargets:
        """The first `n` images' targets as flat arrays (copied: the slot is reused)."""
        counts = slot_payload[3][:n]
        keep = np.arange(slot_payload[1].shape[1]) < counts[:, :1]
        offsets = np.zeros(n + 1, np.int64)
        offsets[1:] = np.cumsum(counts[:, 0])
        masks = slot_payload[4][:n].copy() if len(slot_payload) > 4 else None
        return PackedTargets(slot_payload[1][:n][keep], slot_payload[2][:n][keep], offsets, masks,
                             int(counts[:, 1].sum()), int(counts[:, 2].sum()))
