"""A COCO-shaped stand-in: `train2017/*.jpg` and `annotations/instances_train2017.json` in the real
instances layout (images, annotations with bbox/category_id/iscrowd/area and polygon or RLE
segmentation, categories with COCO's sparse ids), and a few malformed annotations.

The boxes are in the pixels: every object is filled with its category's colour (`COLOURS`,
saturated, on a muted background), objects never touch, and each annotation's box is exactly the
extent of its filled pixels. A box that drifts from its object, or a mask that does, shows."""
from __future__ import annotations

import io
import json
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from PIL import Image

from ..errors import OptionError
from ..image.masks import polygon_mask, rle_encode

IMAGES_DIR, ANNOTATIONS = "train2017", "annotations/instances_train2017.json"
CATEGORIES = [(1, "person"), (2, "bicycle"), (3, "car"), (5, "airplane"), (7, "train"), (9, "boat"),
              (11, "fire hydrant"), (13, "stop sign")]
COLOURS = np.array([[230, 30, 30], [30, 200, 40], [35, 40, 230], [235, 220, 25], [220, 30, 220],
                    [25, 215, 220], [245, 135, 15], [125, 25, 175]], np.uint8)  # by category position
# the malformed annotations, each on its own image (index % count), each with the reason preprocess gives
MALFORMED = ("outside", "zero_area", "unknown_category", "mask_size", "unknown_image", "bad_bbox")


@dataclass(frozen=True)
class CocoSummary:
    """What `synth_coco` wrote."""

    root: Path
    images: int
    annotations: int
    malformed: int
    seconds: float


def colour_of(category_id: int) -> np.ndarray:
    """The RGB colour objects of COCO category `category_id` are filled with."""
    colour: np.ndarray = COLOURS[[c for c, _ in CATEGORIES].index(category_id)]
    return colour


def _background(rng: np.random.Generator, width: int, height: int) -> np.ndarray:
    """A smooth, muted colour field with grain (saturation kept low so objects stand out)."""
    grid = rng.integers(70, 180, (3, 4, 1)).astype(np.uint8).repeat(3, axis=2)
    grid = (grid + rng.integers(-12, 12, grid.shape)).clip(0, 255).astype(np.uint8)
    field = np.asarray(Image.fromarray(grid).resize((width, height), Image.Resampling.BICUBIC), np.int16)
    grain = rng.integers(-10, 10, (height, width, 1))
    return (field + grain).clip(0, 255).astype(np.uint8)


def _place(rng: np.random.Generator, width: int, height: int, placed: list[tuple[int, int, int, int]]
           ) -> tuple[int, int, int, int] | None:
    """A box (left, top, right, bottom, whole pixels) at least 8 px from every placed one."""
    for _ in range(30):
        w, h = int(rng.integers(24, max(25, width // 3))), int(rng.integers(24, max(25, height // 3)))
        x, y = int(rng.integers(0, width - w)), int(rng.integers(0, height - h))
        if all(x >= r + 8 or x + w + 8 <= lft or y >= b + 8 or y + h + 8 <= t for lft, t, r, b in placed):
            return x, y, x + w, y + h
    return None


def _object(rng: np.random.Generator, box: tuple[int, int, int, int], height: int, width: int
            ) -> tuple[np.ndarray, dict[str, Any], int]:
    """One object's pixels, segmentation and iscrowd: a rectangle or a 24-gon ellipse as a polygon,
    or a crowd blob as uncompressed RLE, or now and then an object as a compressed RLE string."""
    left, top, right, bottom = box
    shape = int(rng.integers(6))
    if shape < 3:  # rectangle
        poly = [float(v) for v in (left, top, right, top, right, bottom, left, bottom)]
        return polygon_mask([poly], height, width), {"segmentation": [poly]}, 0
    cx, cy, rx, ry = (left + right) / 2, (top + bottom) / 2, (right - left) / 2, (bottom - top) / 2
    angles = np.linspace(0, 2 * np.pi, 24, endpoint=False)
    poly = np.stack([cx + rx * np.cos(angles), cy + ry * np.sin(angles)], 1).round(2).ravel().tolist()
    mask = polygon_mask([poly], height, width)
    if shape < 5:
        return mask, {"segmentation": [poly]}, 0
    if rng.random() < 0.5:  # a crowd region: COCO writes it as uncompressed RLE
        flat = mask.ravel(order="F")
        bounds = np.concatenate([[0], np.flatnonzero(np.diff(flat.astype(np.int8))) + 1, [flat.size]])
        counts = ([0] if flat[0] else []) + np.diff(bounds).tolist()
        return mask, {"segmentation": {"counts": counts, "size": [height, width]}}, 1
    return mask, {"segmentation": {"counts": rle_encode(mask), "size": [height, width]}}, 0


def _bbox(mask: np.ndarray) -> list[float]:
    """COCO's [x, y, w, h] of a mask's pixels (pixel edges)."""
    ys, xs = np.nonzero(mask)
    return [float(xs.min()), float(ys.min()), float(xs.max() + 1 - xs.min()), float(ys.max() + 1 - ys.min())]


def _malformed(kind: str, image: dict[str, Any], ann_id: int) -> dict[str, Any]:
    """One malformed annotation of `kind` on `image` (never drawn)."""
    w, h = image["width"], image["height"]
    ann: dict[str, Any] = {"id": ann_id, "image_id": image["id"], "category_id": 1, "iscrowd": 0,
                           "bbox": [w - 20.0, 10.0, 60.0, 30.0], "area": 1800.0,
                           "segmentation": [[w - 20.0, 10.0, w + 40.0, 10.0, w + 40.0, 40.0, w - 20.0, 40.0]]}
    if kind == "zero_area":
        ann.update(bbox=[10.0, 10.0, 0.0, 25.0], area=0.0, segmentation=[])
    elif kind == "unknown_category":
        ann.update(category_id=99, bbox=[1.0, 1.0, 5.0, 5.0], segmentation=[])
    elif kind == "mask_size":
        ann.update(bbox=[1.0, 1.0, 5.0, 5.0], segmentation={"counts": [(h + 10) * w], "size": [h + 10, w]})
    elif kind == "unknown_image":
        ann.update(image_id=10**9, bbox=[1.0, 1.0, 5.0, 5.0], segmentation=[])
    elif kind == "bad_bbox":
        ann.update(bbox=[1.0, "two", 5.0], segmentation=[])
    return ann


def render(index: int, seed: int, first_ann: int) -> tuple[bytes, dict[str, Any], list[dict[str, Any]]]:
    """One image: its JPEG bytes, its `images` entry and its (well-formed) annotations."""
    rng = np.random.default_rng([seed, index])
    width, height = int(rng.integers(320, 641)), int(rng.integers(240, 481))
    pixels = _background(rng, width, height)
    image = {"id": index + 1, "file_name": f"{index + 1:012d}.jpg", "width": width, "height": height,
             "license": 1, "coco_url": "", "date_captured": "2026-11-28 00:00:00"}
    annotations: list[dict[str, Any]] = []
    placed: list[tuple[int, int, int, int]] = []
    for _ in range(int(rng.integers(1, 8))):
        box = _place(rng, width, height, placed)
        if box is None:
            break
        placed.append(box)
        category = CATEGORIES[int(rng.integers(len(CATEGORIES)))][0]
        mask, segmentation, crowd = _object(rng, box, height, width)
        pixels[mask] = colour_of(category)
        annotations.append({"id": first_ann + len(annotations), "image_id": image["id"], "category_id": category,
                            "iscrowd": crowd, "area": float(mask.sum()), "bbox": _bbox(mask), **segmentation})
    buf = io.BytesIO()
    Image.fromarray(pixels).save(buf, "JPEG", quality=95, subsampling=0)
    return buf.getvalue(), image, annotations


def synth_coco(out: Path, images: int = 64, seed: int = 0, overwrite: bool = False) -> CocoSummary:
    """Write a COCO-shaped stand-in of `images` images under OUT (`train2017/`, `annotations/`).
    The same seed gives byte-identical files."""
    if images < 1:
        raise OptionError(f"images must be at least 1, got {images}")
    out = Path(out)
    if out.exists() and any(out.iterdir()) and not overwrite:
        raise OptionError(f"{out} is not empty: pass a new or empty folder (or overwrite=True)")
    start = time.perf_counter()
    (out / IMAGES_DIR).mkdir(parents=True, exist_ok=True)
    (out / ANNOTATIONS).parent.mkdir(parents=True, exist_ok=True)
    entries: list[dict[str, Any]] = []
    annotations: list[dict[str, Any]] = []
    for index in range(images):
        data, image, anns = render(index, seed, len(annotations) + 1)
        (out / IMAGES_DIR / image["file_name"]).write_bytes(data)
        entries.append(image)
        annotations += anns
    good = len(annotations)
    for k, kind in enumerate(MALFORMED):
        annotations.append(_malformed(kind, entries[k % len(entries)], len(annotations) + 1))
    document = {"info": {"description": "iofeed COCO-shaped stand-in", "version": "1.0", "year": 2026},
                "licenses": [{"id": 1, "name": "CC0", "url": ""}], "images": entries, "annotations": annotations,
                "categories": [{"id": c, "name": n, "supercategory": "thing"} for c, n in CATEGORIES]}
    (out / ANNOTATIONS).write_text(json.dumps(document), encoding="utf-8")
    return CocoSummary(out, images, good, len(MALFORMED), time.perf_counter() - start)
