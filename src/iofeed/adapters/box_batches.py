"""A batch's box targets in the framework's form, built once per batch from flat arrays: the
boxes moved through each image's recorded crop and flip (`augment.box_geometry`), labels,
and with masks the instance-id maps renumbered to the boxes kept.

torch: a list of one dict per image, `{"boxes": tv_tensors.BoundingBoxes (XYXY, output pixels),
"labels": int64}` (+ `"masks"`: `tv_tensors.Mask` (n, H, W) uint8, split from the id map on the
loader's device), what torchvision's detection models and v2 transforms take. numpy / JAX: one
dict of padded arrays, `boxes` (B, max_boxes, 4), `labels` (B, max_boxes) (-1 past `counts`),
`counts` (B,), and `masks` (B, H, W) instance-id maps (box k of an image is id k + 1).
Evaluation batches (letterboxed) also carry `scale` (x, y: output pixels per annotated pixel)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from ..augment.box_geometry import MIN_VISIBLE, MovedBoxes, letterbox_shape, move_boxes
from ..engines.base import Batch
from ..sources.box_targets import BoxTable


@dataclass
class BoxBatch:
    """One batch's targets as flat arrays (what crosses no process boundary but this one)."""

    moved: MovedBoxes
    labels: np.ndarray  # int64 (m,)
    masks: np.ndarray | None  # uint8 (n, H, W), ids renumbered to the kept boxes
    scale: np.ndarray | None  # float32 (n, 2) for letterboxed (evaluation) images


def box_batch(table: BoxTable, batch: Batch, side: int, letterbox: bool, min_visible: float = MIN_VISIBLE
              ) -> BoxBatch:
    """The targets of `batch` (its `geometry` recorded by the workers) at output side `side`."""
    geometry, samples = batch.geometry, np.asarray(batch.indices, np.int64)
    counts, positions = table.gather(samples)
    scales = out_scale = None
    if letterbox:
        stored = geometry.crops[:, 2:4].astype(np.float64)  # the whole stored image
        shapes = np.array([letterbox_shape(int(round(w)), int(round(h)), side) for w, h in stored], np.float64)
        scales = shapes[:, ::-1] / np.maximum(stored, 1e-9)
        out_scale = (shapes[:, ::-1] / table.sizes[samples]).astype(np.float32)
    moved = move_boxes(table.boxes[positions], counts, geometry.crops, geometry.flips, (side, side), min_visible,
                       scales)
    masks = None
    if geometry.masks is not None:
        lut = np.zeros((len(samples), 256), np.uint8)
        per = np.diff(moved.offsets)
        owner = np.repeat(np.arange(len(samples)), per)
        lut[owner, moved.source + 1] = (np.arange(len(owner)) - moved.offsets[owner] + 1).astype(np.uint8)
        masks = geometry.masks.copy()  # its own memory: the workers' slot is reused
        if moved.dropped:  # else every box is kept in its order: each table is the identity
            for i, ids in enumerate(geometry.masks):  # a 256-entry table per image: ~10x take_along_axis's speed
                np.take(lut[i], ids, out=masks[i])
    return BoxBatch(moved, table.labels[positions][moved.kept], masks, out_scale)


def as_numpy(boxes: BoxBatch) -> dict[str, np.ndarray]:
    """Padded arrays: boxes (B, max, 4), labels (B, max) -1 past each count, counts (B,)."""
    offsets = boxes.moved.offsets
    counts = np.diff(offsets)
    n, most = len(counts), int(counts.max()) if len(counts) else 0
    slot = np.arange(len(boxes.labels)) - np.repeat(offsets[:-1], counts)
    row = np.repeat(np.arange(n), counts)
    padded = np.zeros((n, most, 4), np.float32)
    labels = np.full((n, most), -1, np.int64)
    padded[row, slot], labels[row, slot] = boxes.moved.boxes, boxes.labels
    out: dict[str, np.ndarray] = {"boxes": padded, "labels": labels, "counts": counts.astype(np.int64)}
    if boxes.masks is not None:
        out["masks"] = boxes.masks
    if boxes.scale is not None:
        out["scale"] = boxes.scale
    return out


def as_torch(boxes: BoxBatch, side: int, device: Any) -> list[dict[str, Any]]:
    """One dict per image with tv_tensors, on `device`; per-object masks split there from the id map."""
    import torch
    from torchvision import tv_tensors

    flat = torch.from_numpy(boxes.moved.boxes).to(device, non_blocking=True)
    labels = torch.from_numpy(boxes.labels).to(device, non_blocking=True)
    ids = torch.from_numpy(boxes.masks).to(device, non_blocking=True) if boxes.masks is not None else None
    # on the CPU numpy splits an id map ~10x faster than torch's broadcast uint8 comparison (docs/benchmarks.md)
    host = boxes.masks if ids is not None and ids.device.type == "cpu" else None
    offsets = boxes.moved.offsets.tolist()
    out = []
    for i in range(len(offsets) - 1):
        lo, hi = offsets[i], offsets[i + 1]
        target: dict[str, Any] = {
            "boxes": tv_tensors.BoundingBoxes(flat[lo:hi], format="XYXY", canvas_size=(side, side)),
            "labels": labels[lo:hi]}
        if host is not None:
            target["masks"] = tv_tensors.Mask(torch.from_numpy(split_on_host(host[i], hi - lo)))
        elif ids is not None:
            target["masks"] = tv_tensors.Mask(split_on_device(ids[i], hi - lo))
        if boxes.scale is not None:
            target["scale"] = torch.from_numpy(boxes.scale[i])
        out.append(target)
    return out


def split_on_host(ids: np.ndarray, count: int) -> np.ndarray:
    """An instance-id map (H, W) as `count` uint8 masks (count, H, W): mask k is id k + 1."""
    split: np.ndarray = np.equal(ids[None], np.arange(1, count + 1, dtype=np.uint8)[:, None, None]).view(np.uint8)
    return split


def split_on_device(ids: Any, count: int) -> Any:
    """The same on a torch tensor, on its device (a GPU's: one kernel per image)."""
    import torch

    numbers = torch.arange(1, count + 1, device=ids.device, dtype=ids.dtype)
    return (ids[None] == numbers[:, None, None]).to(torch.uint8)
