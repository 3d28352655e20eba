"""A detection sample's targets as the dataset stores them: boxes scaled to the stored image
(float32 xyxy), labels (int64), iscrowd, and its instance masks drawn at the stored size into
one uint8 instance-id map (object k is id k + 1; a later object covers an earlier one where they
overlap), or for a semantic segmentation sample (`label_map` in its spec: a PNG of class ids)
that map resized nearest-neighbour, its class ids kept; the map stored as row runs (`mask.rows`,
`image/mask_rows.py`; datasets made before hold `mask.png`). Members beside the image in its shard,
and per split the flat side file the loader reads (`<split>-boxes.npz`: offsets, boxes, labels,
iscrowd; `<split>-masks.npy`: each mask member's offset and size in the image's shard)."""
from __future__ import annotations

import io
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from ..format.shards import member_after
from ..image.mask_rows import ROWS_MEMBER, encode_rows
from ..image.masks import crop_resize_nearest, encode_png, polygon_mask, rle_mask

MASK_FORM = "rows"  # what preprocess writes: the manifest's `mask_form` (image/masks.py MASK_FORMS; absent: "png")
MASK_WRITERS = {"rows": (ROWS_MEMBER, encode_rows), "png": ("mask.png", encode_png)}  # member name, encoder


def _npy(array: np.ndarray) -> bytes:
    buf = io.BytesIO()
    np.save(buf, array, allow_pickle=False)
    return buf.getvalue()


@dataclass
class StoredObjects:
    """One sample's targets at its stored size."""

    boxes: np.ndarray  # float32 (n, 4) xyxy in stored pixels
    labels: np.ndarray  # int64 (n,)
    iscrowd: np.ndarray  # uint8 (n,)
    ids: np.ndarray | None  # uint8 (height, width) instance-id map, or None without masks
    annotated: tuple[int, int]  # the annotated image's width, height (predictions map back to it)

    def members(self) -> dict[str, bytes]:
        """The shard members after the image (the mask first: the loader finds it by `member_after`)."""
        member, encode = MASK_WRITERS[MASK_FORM]
        out = {member: encode(self.ids)} if self.ids is not None else {}
        out.update({"boxes.npy": _npy(self.boxes), "labels.npy": _npy(self.labels)})
        return out


def store_objects(spec: dict[str, Any], width: int, height: int, masks: bool) -> StoredObjects:
    """`spec` ({"size": [w, h] annotated, "objects": [...], optional "label_map": a PNG path}) at the
    stored `width` x `height`. ValueError when the label map is not of the annotated size."""
    objects = spec["objects"]
    sx, sy = width / spec["size"][0], height / spec["size"][1]
    boxes = np.asarray([o["box"] for o in objects], np.float64).reshape(-1, 4) * [sx, sy, sx, sy]
    boxes = boxes.clip(0, [width, height, width, height]).astype(np.float32)
    labels = np.asarray([o["label"] for o in objects], np.int64)
    crowd = np.asarray([o["iscrowd"] for o in objects], np.uint8)
    ids = None
    if "label_map" in spec:
        ids = _label_map(spec["label_map"], spec["size"], width, height)
    elif masks:
        ids = np.zeros((height, width), np.uint8)
        for k, obj in enumerate(objects):
            ids[_mask(obj["segmentation"], spec["size"], sx, sy, width, height)] = k + 1
    return StoredObjects(boxes, labels, crowd, ids, (int(spec["size"][0]), int(spec["size"][1])))


def _mask(seg: Any, size: list[int], sx: float, sy: float, width: int, height: int) -> np.ndarray:
    """A segmentation at the stored size: polygons scaled and drawn there, RLE decoded at the
    annotated size and resized nearest-neighbour."""
    if isinstance(seg, list):
        scaled = [(np.asarray(p, np.float64).reshape(-1, 2) * [sx, sy]).ravel().tolist() for p in seg]
        return polygon_mask(scaled, height, width)
    full = rle_mask(seg["counts"], size[1], size[0])
    return crop_resize_nearest(full, (0, 0, size[0], size[1]), False, (height, width))


def _label_map(path: str, size: list[int], width: int, height: int) -> np.ndarray:
    """A semantic label map (class ids; a palette PNG's indices) at the stored size."""
    from PIL import Image

    with Image.open(path) as opened:
        full = np.asarray(opened if opened.mode in ("L", "P") else opened.convert("L"), np.uint8)
    if full.shape != (size[1], size[0]):
        raise ValueError(f"mask of another size ({path} is {full.shape[1]}x{full.shape[0]}, the image "
                         f"{size[0]}x{size[1]})")
    return crop_resize_nearest(full, (0, 0, size[0], size[1]), False, (height, width))


@dataclass
class SplitObjects:
    """One split's stored targets, in table order."""

    counts: list[int] = field(default_factory=list)
    boxes: list[np.ndarray] = field(default_factory=list)
    labels: list[np.ndarray] = field(default_factory=list)
    iscrowd: list[np.ndarray] = field(default_factory=list)
    masks: list[tuple[int, int]] = field(default_factory=list)  # (offset, size) of each mask member
    sizes: list[tuple[int, int]] = field(default_factory=list)  # annotated width, height

    def add(self, stored: StoredObjects, image_offset: int, image_size: int, mask_size: int) -> None:
        self.counts.append(len(stored.labels))
        self.boxes.append(stored.boxes)
        self.labels.append(stored.labels)
        self.iscrowd.append(stored.iscrowd)
        self.sizes.append(stored.annotated)
        if stored.ids is not None:
            self.masks.append((member_after(image_offset, image_size), mask_size))

    def save(self, directory: Path, split: str) -> dict[str, str]:
        """Write the split's side files; their names by kind ("boxes", and "masks" when stored)."""
        offsets = np.zeros(len(self.counts) + 1, np.int64)
        offsets[1:] = np.cumsum(self.counts)
        names = {"boxes": f"{split}-boxes.npz"}
        np.savez(directory / names["boxes"], offsets=offsets,
                 boxes=np.concatenate(self.boxes or [np.zeros((0, 4), np.float32)]).reshape(-1, 4),
                 labels=np.concatenate(self.labels or [np.zeros(0, np.int64)]),
                 iscrowd=np.concatenate(self.iscrowd or [np.zeros(0, np.uint8)]),
                 sizes=np.asarray(self.sizes, np.int64).reshape(-1, 2))
        if self.masks:
            names["masks"] = f"{split}-masks.npy"
            np.save(directory / names["masks"], np.asarray(self.masks, np.int64).reshape(-1, 2), allow_pickle=False)
        return names
