"""A batch's box targets in the framework's form, built once per batch from flat arrays: the
boxes moved through each image's recorded crop and flip (`augment.box_geometry`), labels,
and with masks each image's id map and every kept box's id in it (numpy / tf: the maps renumbered
to the kept boxes; torch: split by those ids, never renumbered); with `transform=`, what it returned.

torch: a list of one dict per image, `{"boxes": tv_tensors.BoundingBoxes (XYXY, output pixels),
"labels": int64}` (+ `"masks"`: `tv_tensors.Mask` (n, H, W) uint8, split from the id map on the
loader's device), what torchvision's detection models and v2 transforms take. numpy / JAX: one
dict of padded arrays, `boxes` (B, max_boxes, 4), `labels` (B, max_boxes) (-1 past `counts`),
`counts` (B,), and `masks` (B, H, W) instance-id maps (box k of an image is id k + 1). tf: the same
dict with `tf.RaggedTensor` boxes and labels (`tf_boxes.py`).
Evaluation batches (letterboxed) also carry `scale` (x, y: output pixels per annotated pixel).
A semantic segmentation dataset's batches hold only `masks`: (B, H, W) class ids as stored, the
letterbox padding 255 (ignore); torch: one `{"masks": tv_tensors.Mask (H, W)}` per image."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from ..augment.box_geometry import MIN_VISIBLE, MovedBoxes, letterbox_scales, move_boxes
from ..augment.fitting import pad_semantic
from ..augment.target_transforms import PackedTargets
from ..engines.base import Batch
from ..sources.box_targets import BoxTable

IGNORE = 255  # a semantic mask's "no class" (VOC, Cityscapes): what letterbox padding is


@dataclass
class BoxBatch:
    """One batch's targets as flat arrays (what crosses no process boundary but this one)."""

    moved: MovedBoxes
    labels: np.ndarray  # int64 (m,)
    masks: np.ndarray | None  # uint8 (n, H, W) id maps as the workers cut them (`id_maps()`: renumbered)
    scale: np.ndarray | None  # float32 (n, 2) for letterboxed (evaluation) images
    canvas: tuple[int, int]  # the output images' (height, width)
    dropped_by_transform: int = 0  # boxes `transform=` did not return
    semantic: bool = False  # masks are class ids (no boxes)
    mask_ids: np.ndarray | None = None  # uint8 (m,): each kept box's id in `masks` (None: box k is id k + 1)

    def id_maps(self) -> np.ndarray | None:
        """The id maps with box k of each image as id k + 1 (the numpy / tf form), renumbered in
        place once: a 256-entry table per image (~10x take_along_axis's speed), skipped where no box
        was dropped. torch splits by `mask_ids` instead and never renumbers."""
        if self.masks is None or self.mask_ids is None:
            return self.masks
        offsets = self.moved.offsets
        per = np.diff(offsets)
        owner = np.repeat(np.arange(len(per)), per)
        wanted = (np.arange(len(owner)) - offsets[owner] + 1).astype(np.uint8)
        if not np.array_equal(self.mask_ids, wanted):
            lut = np.zeros((len(per), 256), np.uint8)
            lut[owner, self.mask_ids] = wanted
            for i, ids in enumerate(self.masks):
                np.take(lut[i], ids, out=ids)  # mode "raise" buffers `out`: in place is safe
        self.mask_ids = None
        return self.masks


def box_batch(table: BoxTable, batch: Batch, side: int, letterbox: bool, min_visible: float = MIN_VISIBLE,
              fitted: bool = False) -> BoxBatch:
    """The targets of `batch` (its `geometry` recorded by the workers) at output side `side`; with
    `transform=`, as it returned them (`batch.targets`: moved in the workers, no `scale`);
    `fitted`: each crop was placed on the canvas (`Recipe(fit=...)`, `augment/fitting.py`)."""
    if isinstance(batch.targets, PackedTargets):
        return transformed_batch(batch.targets, batch.images.shape[1:3])
    geometry, samples = batch.geometry, np.asarray(batch.indices, np.int64)
    counts, positions = table.gather(samples)
    scales = out_scale = shapes = None
    if letterbox:
        scales, shapes = letterbox_scales(geometry.crops, side)  # the crop is the whole stored image
        out_scale = (shapes / table.sizes[samples]).astype(np.float32)
    moved = move_boxes(table.boxes[positions], counts, geometry.crops, geometry.flips, (side, side), min_visible,
                       scales, geometry.placed if fitted else None)
    masks = None
    if table.semantic:
        masks = geometry.masks
        if masks is not None and shapes is not None:
            for i, (width, height) in enumerate(shapes.astype(np.int64)):
                masks[i, height:], masks[i, :, width:] = IGNORE, IGNORE
        if masks is not None and fitted:
            pad_semantic(masks, geometry.placed, geometry.flips, IGNORE)
        return BoxBatch(moved, table.labels[positions][moved.kept], masks, out_scale, (side, side),
                        semantic=True)
    mask_ids = (moved.source + 1).astype(np.uint8) if geometry.masks is not None else None
    # geometry.masks is the batch's own copy (`TargetLayout.geometry`): renumbered there only if asked
    return BoxBatch(moved, table.labels[positions][moved.kept], geometry.masks, out_scale, (side, side),
                    mask_ids=mask_ids)


def transformed_batch(packed: PackedTargets, canvas: tuple[int, int]) -> BoxBatch:
    """A batch's targets as `transform=` returned them in the workers."""
    kept = np.arange(len(packed.labels), dtype=np.int64)
    moved = MovedBoxes(packed.boxes, packed.offsets, kept, kept, packed.dropped_not_visible)
    return BoxBatch(moved, packed.labels, packed.masks, None, (int(canvas[0]), int(canvas[1])),
                    packed.dropped_by_transform)


def as_numpy(boxes: BoxBatch) -> dict[str, np.ndarray]:
    """Padded arrays: boxes (B, max, 4), labels (B, max) -1 past each count, counts (B,)."""
    if boxes.semantic:
        assert boxes.masks is not None, "a semantic dataset is read with target='masks'"
        return {"masks": boxes.masks, **({"scale": boxes.scale} if boxes.scale is not None else {})}
    offsets = boxes.moved.offsets
    counts = np.diff(offsets)
    n, most = len(counts), int(counts.max()) if len(counts) else 0
    slot = np.arange(len(boxes.labels)) - np.repeat(offsets[:-1], counts)
    row = np.repeat(np.arange(n), counts)
    padded = np.zeros((n, most, 4), np.float32)
    labels = np.full((n, most), -1, np.int64)
    padded[row, slot], labels[row, slot] = boxes.moved.boxes, boxes.labels
    out: dict[str, np.ndarray] = {"boxes": padded, "labels": labels, "counts": counts.astype(np.int64)}
    masks = boxes.id_maps()
    if masks is not None:
        out["masks"] = masks
    if boxes.scale is not None:
        out["scale"] = boxes.scale
    return out


def as_torch(boxes: BoxBatch, device: Any) -> list[dict[str, Any]]:
    """One dict per image with tv_tensors, on `device`; per-object masks split there from the id map."""
    import torch
    from torchvision import tv_tensors

    if boxes.semantic:
        assert boxes.masks is not None, "a semantic dataset is read with target='masks'"
        maps = torch.from_numpy(boxes.masks).to(device, non_blocking=True)
        return [{"masks": tv_tensors.Mask(maps[i])} for i in range(len(maps))]
    flat = torch.from_numpy(boxes.moved.boxes).to(device, non_blocking=True)
    labels = torch.from_numpy(boxes.labels).to(device, non_blocking=True)
    ids = torch.from_numpy(boxes.masks).to(device, non_blocking=True) if boxes.masks is not None else None
    # on the CPU numpy splits an id map ~10x faster than torch's broadcast uint8 comparison (docs/benchmarks.md)
    host = boxes.masks if ids is not None and ids.device.type == "cpu" else None
    offsets = boxes.moved.offsets.tolist()
    numbers = (boxes.mask_ids if boxes.mask_ids is not None else
               (np.arange(len(boxes.labels)) - np.repeat(boxes.moved.offsets[:-1], np.diff(boxes.moved.offsets))
                + 1).astype(np.uint8))
    on_device = None  # a device's split: the batch's ids copied there once
    if ids is not None and host is None:
        on_device = torch.from_numpy(numbers).to(ids.device, non_blocking=True)
    out = []
    for i in range(len(offsets) - 1):
        lo, hi = offsets[i], offsets[i + 1]
        target: dict[str, Any] = {
            "boxes": tv_tensors.BoundingBoxes(flat[lo:hi], format="XYXY", canvas_size=boxes.canvas),
            "labels": labels[lo:hi]}
        if host is not None:
            target["masks"] = tv_tensors.Mask(torch.from_numpy(split_on_host(host[i], numbers[lo:hi])))
        elif ids is not None and on_device is not None:
            target["masks"] = tv_tensors.Mask(split_on_device(ids[i], on_device[lo:hi]))
        if boxes.scale is not None:
            target["scale"] = torch.from_numpy(boxes.scale[i])
        out.append(target)
    return out


def _numbers(which: int | np.ndarray) -> np.ndarray:
    return np.arange(1, which + 1, dtype=np.uint8) if isinstance(which, int) else np.asarray(which, np.uint8)


def split_on_host(ids: np.ndarray, which: int | np.ndarray) -> np.ndarray:
    """An instance-id map (H, W) as uint8 masks (k, H, W): mask k is the pixels of id `which[k]`
    (an int n: ids 1..n)."""
    split: np.ndarray = np.equal(ids[None], _numbers(which)[:, None, None]).view(np.uint8)
    return split


def split_on_device(ids: Any, which: Any) -> Any:
    """The same on a torch tensor, on its device (a GPU's: one kernel per image); `which` an int,
    a numpy array or a uint8 tensor already there (the batch's ids, copied once)."""
    import torch

    numbers = which if isinstance(which, torch.Tensor) else torch.from_numpy(_numbers(which)).to(ids.device)
    return (ids[None] == numbers[:, None, None]).to(torch.uint8)
