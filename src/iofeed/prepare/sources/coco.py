"""The `coco` source: COCO instances JSON (images, annotations, categories) + its image folder.

Each image is a sample; its objects (boxes as xyxy in the file's pixels, category indices,
iscrowd, polygons or RLE) travel as the sample's `objects`, its categories as a multi-label
target. Every annotation that cannot be stored is rejected with its reason (`rejected.jsonl`):
a box outside the image, zero area, an unknown category or image, a mask of another size."""
from __future__ import annotations

import json
import math
import os
from pathlib import Path
from typing import Any

from ...errors import SourceError
from ...image.masks import MAX_INSTANCES
from ...sources.folder_scan import Rejection
from .base import SourceOptions, SourceScan
from .label_targets import Targets

PROBE_BYTES = 1 << 20
EDGE_SLACK = 1.0  # COCO's boxes overshoot the image by rounding: up to 1 px is clipped, more rejected


def coco_files(path: Path) -> list[Path]:
    """The COCO instances JSON files at the top of `path` or in its `annotations/` (by content:
    a JSON object whose start names `images` entries with a `file_name`)."""
    found = []
    for folder in (path, path / "annotations"):
        if not folder.is_dir():
            continue
        for entry in sorted(os.scandir(folder), key=lambda e: e.name):
            if entry.is_file() and not entry.name.startswith(".") and _looks_like_coco(entry.path):
                found.append(Path(entry.path))
    return found


def _looks_like_coco(path: str) -> bool:
    with open(path, "rb") as f:
        head = f.read(PROBE_BYTES)
    text = head.lstrip()
    return text.startswith(b"{") and b'"images"' in head and b'"file_name"' in head


def scan(src: str, options: SourceOptions) -> SourceScan:
    """Every image of every instances JSON under `src`, with its valid objects."""
    root = Path(src)
    files = coco_files(root)
    if not files:
        raise SourceError(f"{src}: no COCO instances JSON found (at its top or in annotations/)")
    names: list[str] | None = None
    result: SourceScan | None = None
    for path in files:
        document = _load(path)
        categories = _categories(document, path)
        if names is None:
            names = [name for _, name in categories]
            result = SourceScan(root=str(root), kind="coco", targets=Targets(names=names), objects=[])
        elif [name for _, name in categories] != names:
            raise SourceError(f"{path}: its categories differ from {files[0].name}'s: pass one annotations file")
        assert result is not None
        _add_images(result, document, categories, path, root)
    assert result is not None
    return result


def _load(path: Path) -> dict[str, Any]:
    try:
        document = json.loads(path.read_bytes())
    except (ValueError, UnicodeDecodeError) as exc:
        raise SourceError(f"{path}: malformed JSON ({exc}): fix or replace the annotations file") from None
    if not isinstance(document, dict) or not all(isinstance(document.get(k), list)
                                                 for k in ("images", "annotations", "categories")):
        raise SourceError(f"{path}: not a COCO instances file (it needs lists `images`, `annotations` and "
                          "`categories`)")
    return document


def _categories(document: dict[str, Any], path: Path) -> list[tuple[int, str]]:
    """(id, name) by id: the dataset's classes in COCO's order (their indices are the labels)."""
    try:
        found = sorted((int(c["id"]), str(c["name"])) for c in document["categories"])
    except (KeyError, TypeError, ValueError):
        raise SourceError(f"{path}: a category without an integer `id` and a `name`") from None
    if len({i for i, _ in found}) != len(found) or not found:
        raise SourceError(f"{path}: category ids must be unique, and there must be at least one")
    return found


def folder_of(root: Path, file_name: str) -> Path | None:
    """Where the images are: `root`, `root/images` or a folder at the top of `root` holding `file_name`."""
    candidates = [root, root / "images", *sorted(p for p in root.iterdir() if p.is_dir())]
    return next((folder for folder in candidates if (folder / file_name).is_file()), None)


def _add_images(result: SourceScan, document: dict[str, Any], categories: list[tuple[int, str]], path: Path,
                root: Path) -> None:
    index_of = {cid: k for k, (cid, _) in enumerate(categories)}
    images: dict[Any, dict[str, Any]] = {}
    for image in document["images"]:
        if isinstance(image, dict) and isinstance(image.get("file_name"), str) and "id" in image:
            images[image["id"]] = {"image": image, "objects": []}
        else:
            result.rejected.append(Rejection(f"{path.name}: image {str(image)[:40]}",
                                             "malformed image entry (needs id and file_name)"))
    for ann in document["annotations"]:
        where = f"{path.name}: annotation {ann.get('id') if isinstance(ann, dict) else str(ann)[:20]}"
        entry = images.get(ann.get("image_id")) if isinstance(ann, dict) else None
        if entry is None:
            result.rejected.append(Rejection(where, "annotation of an unknown image (image_id "
                                                    f"{ann.get('image_id') if isinstance(ann, dict) else '?'})"))
            continue
        obj, reason = _object(ann, entry["image"], index_of, len(categories))
        if reason is not None:
            result.rejected.append(Rejection(f"{where} ({entry['image']['file_name']})", reason))
        elif len(entry["objects"]) >= MAX_INSTANCES:
            result.rejected.append(Rejection(where, f"more than {MAX_INSTANCES} objects on one image (the "
                                                    "instance-id map holds 255)"))
        else:
            entry["objects"].append(obj)
    folder = None
    for entry in images.values():
        image = entry["image"]
        folder = folder if folder and (folder / image["file_name"]).is_file() else folder_of(root, image["file_name"])
        if folder is None:
            result.rejected.append(Rejection(image["file_name"], "image file missing (named by the annotations)"))
            continue
        objs = entry["objects"]
        result.add(str(folder / image["file_name"]), image["file_name"], sorted({o["label"] for o in objs}),
                   objects={"size": [int(image["width"]), int(image["height"])], "objects": objs})


def stored_annotations(document: dict[str, Any]) -> list[Any]:
    """The annotations of an instances `document` that `scan` stores (as given), those it rejects
    left out: what a COCO reader other than iofeed is given to read the same objects."""
    try:
        categories = sorted(int(c["id"]) for c in document["categories"])
    except (KeyError, TypeError, ValueError):
        return []
    index_of = {cid: k for k, cid in enumerate(categories)}
    images = {i["id"]: i for i in document["images"]
              if isinstance(i, dict) and isinstance(i.get("file_name"), str) and "id" in i}
    kept: dict[Any, int] = {}
    stored = []
    for ann in document["annotations"]:
        image = images.get(ann.get("image_id")) if isinstance(ann, dict) else None
        if image is None or _object(ann, image, index_of, len(categories))[1] is not None:
            continue
        if kept.get(image["id"], 0) < MAX_INSTANCES:
            kept[image["id"]] = kept.get(image["id"], 0) + 1
            stored.append(ann)
    return stored


def _object(ann: dict[str, Any], image: dict[str, Any], index_of: dict[int, int], count: int
            ) -> tuple[dict[str, Any], str | None]:
    """One annotation as {box (xyxy, clipped), label, iscrowd, segmentation}, or the reason it is rejected."""
    width, height = image.get("width"), image.get("height")
    bbox = ann.get("bbox")
    if not isinstance(width, int) or not isinstance(height, int):
        return {}, "malformed image entry (width and height must be integers)"
    if not (isinstance(bbox, list) and len(bbox) == 4 and all(isinstance(v, (int, float)) and not isinstance(v, bool)
                                                              and math.isfinite(v) for v in bbox)):
        return {}, f"malformed annotation (bbox {json.dumps(bbox)[:40]}: need [x, y, width, height])"
    category = ann.get("category_id")
    if category not in index_of:
        return {}, f"unknown category (category_id {json.dumps(category)[:20]}; {count} categories are listed)"
    x, y, w, h = (float(v) for v in bbox)
    if w <= 0 or h <= 0:
        return {}, f"zero area box ({w:g}x{h:g})"
    if x < -EDGE_SLACK or y < -EDGE_SLACK or x + w > width + EDGE_SLACK or y + h > height + EDGE_SLACK:
        return {}, f"box outside the image ([{x:g}, {y:g}, {x + w:g}, {y + h:g}] in {width}x{height})"
    segmentation = ann.get("segmentation", [])
    reason = _segmentation_problem(segmentation, width, height)
    if reason:
        return {}, reason
    box = [max(0.0, x), max(0.0, y), min(float(width), x + w), min(float(height), y + h)]
    return {"box": box, "label": index_of[category], "iscrowd": int(bool(ann.get("iscrowd", 0))),
            "segmentation": segmentation}, None


def _segmentation_problem(seg: Any, width: int, height: int) -> str | None:
    """Why a segmentation cannot be drawn at the image's size, or None (none given is fine)."""
    if isinstance(seg, list):
        if all(isinstance(p, list) and len(p) % 2 == 0 and all(isinstance(v, (int, float)) for v in p) for p in seg):
            return None
        return "malformed annotation (segmentation polygons must be flat [x1, y1, ...] lists)"
    if isinstance(seg, dict) and isinstance(seg.get("size"), list) and isinstance(seg.get("counts"), (list, str)):
        if list(seg["size"]) != [height, width]:
            size = seg["size"]
            return f"mask of another size (RLE {size[0] if size else '?'}x{size[1] if len(size) > 1 else '?'}, " \
                   f"the image {height}x{width})"
        return None
    return "malformed annotation (segmentation must be polygons or an RLE {counts, size})"
