"""Adversarial detection and segmentation sources (COCO, YOLO, WebDataset boxes, PNG label maps):
every object is a rectangle filled with its class's colour (`COLOURS`, saturated) on a flat grey
background, its box exactly the rectangle, so a box or mask that drifts, a lost or mislabelled
object shows in the delivered pixels. Each builder writes the source clean or damaged the ways
users' annotations are (malformed JSON or rows, boxes outside the image, unknown classes, missing
label files, a mask of another size) and says what must come of it (`TargetSource`)."""
from __future__ import annotations

import io
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from PIL import Image

from iofeed.prepare.synth_coco import COLOURS

BACKGROUND = (128, 128, 128)
IGNORE_COLOUR = (0, 0, 0)  # label-map pixels of 255 (ignore) are drawn black
SEMANTIC_CLASSES = (0, 2, 5, 7)  # 0 is the grey background; ids kept as written, never renumbered
COUNT = 8


@dataclass
class TargetSource:
    """A detection / segmentation source on disk and what preprocessing it must give."""

    kind: str  # the source kind preprocess must recognise
    damage: str
    spec: Path
    boxes: dict[str, list[tuple[list[float], int]]] = field(default_factory=dict)  # sample name -> kept (xyxy, class)
    maps: dict[str, np.ndarray] = field(default_factory=dict)  # sample name -> label map (segmentation)
    reasons: list[str] = field(default_factory=list)  # rejected.jsonl reasons that must appear (prefixes)
    rejected_samples: set[str] = field(default_factory=set)  # samples that must not arrive
    refusal: str | None = None  # the run must fail with a one-line error matching it
    says: str | None = None  # a note the summary must carry
    options: dict[str, Any] = field(default_factory=dict)  # preprocess keywords


def colour_of(label: int) -> tuple[int, int, int]:
    r, g, b = (int(v) for v in COLOURS[label % len(COLOURS)])
    return r, g, b


def _layout(sample: int, width: int, height: int, classes: int) -> list[tuple[list[float], int]]:
    """Two or three rectangles, 10 px apart, whole pixels, classes by sample."""
    rng = np.random.default_rng(sample)
    out: list[tuple[list[float], int]] = []
    x = 6
    for k in range(2 + sample % 2):
        w, h = int(rng.integers(18, 36)), int(rng.integers(18, height - 20))
        y = int(rng.integers(4, height - h - 4))
        out.append(([float(x), float(y), float(x + w), float(y + h)], (sample + k) % classes))
        x += w + 10
    assert x <= width
    return out


def draw(width: int, height: int, objects: list[tuple[list[float], int]]) -> np.ndarray:
    pixels = np.empty((height, width, 3), np.uint8)
    pixels[...] = BACKGROUND
    for (x0, y0, x1, y1), label in objects:
        pixels[int(y0):int(y1), int(x0):int(x1)] = colour_of(label)
    return pixels


def _encoded(pixels: np.ndarray, kind: str = "PNG") -> bytes:
    out = io.BytesIO()
    Image.fromarray(pixels).save(out, kind, **({"quality": 95} if kind == "JPEG" else {}))
    return out.getvalue()


def _size(sample: int) -> tuple[int, int]:
    return 140 + 4 * sample, 96 + 2 * (sample % 3)


# ------------------------------------------------------------------ YOLO


def yolo(root: Path, damage: str) -> TargetSource:
    """`images/train` + `labels/train` and a data.yaml (3 classes). Damages: `outside` (a box past the
    right edge), `zero_area`, `unknown_class` (class 9 of 3), `malformed_row`, `missing_labels`
    (an image without a label file: a background image, counted in the summary)."""
    src = root / "yolo"
    (src / "images" / "train").mkdir(parents=True)
    (src / "labels" / "train").mkdir(parents=True)
    (src / "data.yaml").write_text("path: .\ntrain: images/train\nnames:\n  0: ant\n  1: bee\n  2: cat\n")
    source = TargetSource("yolo", damage, src)
    for sample in range(COUNT):
        width, height = _size(sample)
        objects = _layout(sample, width, height, 3)
        name = f"images/train/{sample:04d}.png"
        (src / name).write_bytes(_encoded(draw(width, height, objects)))
        rows = [f"{label} {(x0 + x1) / 2 / width:.6f} {(y0 + y1) / 2 / height:.6f} {(x1 - x0) / width:.6f} "
                f"{(y1 - y0) / height:.6f}" for (x0, y0, x1, y1), label in objects]
        if sample == 3 and damage == "missing_labels":
            source.boxes[name] = []
            source.says = r"1 images without a label file, kept as background"
            continue
        bad = {"outside": "1 1.05 0.5 0.2 0.2", "zero_area": "0 0.5 0.5 0 0.2", "unknown_class": "9 0.5 0.5 0.1 0.1",
               "malformed_row": "1 0.5 0.5 0.1"}.get(damage)
        if sample == 2 and bad:
            rows.append(bad)
            source.reasons.append({"outside": "box outside the image", "zero_area": "zero area box",
                                   "unknown_class": "unknown class", "malformed_row": "malformed row"}[damage])
        (src / "labels" / "train" / f"{sample:04d}.txt").write_text("\n".join(rows) + "\n")
        source.boxes[name] = objects
    return source


# ------------------------------------------------------------------ WebDataset with boxes


def wds_boxes(root: Path, damage: str) -> TargetSource:
    """Two shards of jpg + json samples: `{"bbox": [[x, y, w, h]...], "category_id": [...]}` (COCO's
    xywh by key). Damages: `malformed_json` (a cut json: that sample rejected), `outside`,
    `unknown_class` (-1), `count_mismatch` (3 boxes, 2 labels: the sample rejected), `ambiguous`
    (`bboxes` without a format: refused naming --box-format), `xyxy_flag` (`boxes` with a
    `box_format: "pascal_voc"` flag)."""
    from helpers.adversarial import write_tar  # here: adversarial.py imports this module for its BUILDERS

    folder = root / "wds"
    folder.mkdir(parents=True)
    source = TargetSource("wds-boxes", damage, folder / "shard-{000000..000001}.tar")
    for shard in range(2):
        members: list[tuple[str, bytes]] = []
        for sample in range(shard * COUNT // 2, (shard + 1) * COUNT // 2):
            width, height = _size(sample)
            objects = _layout(sample, width, height, 4)
            key, name = f"s{sample:04d}", f"{folder / f'shard-{shard:06d}.tar'}#s{sample:04d}"
            labels = [label for _, label in objects]
            doc: dict[str, Any] = {"bbox": [[x0, y0, x1 - x0, y1 - y0] for (x0, y0, x1, y1), _ in objects],
                                   "category_id": labels, "caption": f"picture {sample}"}
            if damage == "xyxy_flag":
                doc = {"boxes": [box for box, _ in objects], "labels": labels, "box_format": "pascal_voc"}
            if damage == "ambiguous":
                doc = {"bboxes": [box for box, _ in objects], "labels": labels}
            text = json.dumps(doc)
            source.boxes[name] = objects
            if sample == 5 and damage == "malformed_json":
                text = text[: len(text) // 2]
                source.rejected_samples.add(name)
                source.reasons.append("unreadable json member")
            if sample == 5 and damage == "outside":
                doc["bbox"].append([width - 10, 5, 30, 20])
                doc["category_id"].append(1)
                text = json.dumps(doc)
                source.reasons.append("box outside the image")
            if sample == 5 and damage == "unknown_class":
                doc["bbox"].append([2, 2, 3, 3])
                doc["category_id"].append(-1)
                text = json.dumps(doc)
                source.reasons.append("unknown class")
            if sample == 5 and damage == "count_mismatch":
                doc["category_id"] = doc["category_id"][:-1]
                text = json.dumps(doc)
                source.rejected_samples.add(name)
                source.reasons.append("malformed json")
            members += [(f"{key}.jpg", _encoded(draw(width, height, objects), "JPEG")),
                        (f"{key}.json", text.encode())]
        write_tar(folder / f"shard-{shard:06d}.tar", members)
    if damage == "ambiguous":
        source.refusal = r"--box-format"
    return source


# ------------------------------------------------------------------ semantic segmentation


def segmentation(root: Path, damage: str) -> TargetSource:
    """ADE-like `images/training/*.jpg` + `annotations/training/*.png` label maps (classes 0, 2, 5,
    7 and 255 ignore, drawn black). Damages: `mask_size` (one mask 8 px narrower), `missing_mask`,
    `rgb_mask` (a colour-coded mask, not a label map)."""
    src = root / "seg"
    (src / "images" / "training").mkdir(parents=True)
    (src / "annotations" / "training").mkdir(parents=True)
    source = TargetSource("segmentation", damage, src)
    for sample in range(COUNT):
        width, height = _size(sample)
        objects = [(box, SEMANTIC_CLASSES[1 + label % 3]) for box, label in _layout(sample, width, height, 3)]
        label_map = np.zeros((height, width), np.uint8)
        for (x0, y0, x1, y1), label in objects:
            label_map[int(y0):int(y1), int(x0):int(x1)] = label
        label_map[height - 6:, :12] = 255
        pixels = draw(width, height, objects)
        pixels[label_map == 255] = IGNORE_COLOUR
        name = f"images/training/{sample:04d}.png"
        (src / name).write_bytes(_encoded(pixels))
        mask = src / "annotations" / "training" / f"{sample:04d}.png"
        Image.fromarray(label_map, "L").save(mask)
        source.maps[name] = label_map
        if sample == 4 and damage == "mask_size":
            Image.fromarray(label_map[:, 8:], "L").save(mask)
            source.reasons.append("mask of another size")
        if sample == 4 and damage == "missing_mask":
            mask.unlink()
            source.reasons.append("no mask")
        if sample == 4 and damage == "rgb_mask":
            Image.fromarray(pixels).save(mask)
            source.reasons.append("mask not a label map")
        if sample == 4 and damage != "clean":
            source.rejected_samples.add(name)
    return source


# ------------------------------------------------------------------ COCO


def coco(root: Path, damage: str) -> TargetSource:
    """An instances JSON + `images/` (categories with sparse ids 3, 8, 11). Damages:
    `malformed_json` (the file cut: refused naming it), `outside`, `unknown_category`,
    `mask_size` (an RLE of another size)."""
    src = root / "coco"
    (src / "images").mkdir(parents=True)
    ids = [3, 8, 11]
    source = TargetSource("coco", damage, src)
    images, annotations = [], []
    for sample in range(COUNT):
        width, height = _size(sample)
        objects = _layout(sample, width, height, 3)
        name = f"{sample:04d}.png"
        (src / "images" / name).write_bytes(_encoded(draw(width, height, objects)))
        images.append({"id": sample + 1, "file_name": name, "width": width, "height": height})
        for (x0, y0, x1, y1), label in objects:
            annotations.append({"id": len(annotations) + 1, "image_id": sample + 1, "category_id": ids[label],
                                "bbox": [x0, y0, x1 - x0, y1 - y0], "iscrowd": 0, "area": (x1 - x0) * (y1 - y0),
                                "segmentation": [[x0, y0, x1, y0, x1, y1, x0, y1]]})
        source.boxes[f"images/{name}"] = objects
    extra = {"outside": {"bbox": [130, 5, 40, 20], "category_id": 3},
             "unknown_category": {"bbox": [2, 2, 3, 3], "category_id": 99},
             "mask_size": {"bbox": [2, 2, 3, 3], "category_id": 3,
                           "segmentation": {"size": [10, 10], "counts": [0, 100]}}}.get(damage)
    if extra is not None:
        annotations.append({"id": 999, "image_id": 3, "iscrowd": 0, "segmentation": [], **extra})
        source.reasons.append({"outside": "box outside the image", "unknown_category": "unknown category",
                               "mask_size": "mask of another size"}[damage])
    document = {"images": images, "annotations": annotations,
                "categories": [{"id": i, "name": n} for i, n in zip(ids, ("ant", "bee", "cat"))]}
    text = json.dumps(document)
    (src / "instances.json").write_text(text[: len(text) - 40] if damage == "malformed_json" else text)
    if damage == "malformed_json":
        source.refusal = r"instances\.json: malformed JSON"
    return source


TARGET_BUILDERS: dict[str, Callable[[Path, str], TargetSource]] = {
    "coco": coco, "yolo": yolo, "wds-boxes": wds_boxes, "segmentation": segmentation}
DAMAGES = {
    "coco": ["clean", "malformed_json", "outside", "unknown_category", "mask_size"],
    "yolo": ["clean", "outside", "zero_area", "unknown_class", "malformed_row", "missing_labels"],
    "wds-boxes": ["clean", "malformed_json", "outside", "unknown_class", "count_mismatch", "ambiguous", "xyxy_flag"],
    "segmentation": ["clean", "mask_size", "missing_mask", "rgb_mask"],
}


def build_targets(root: Path, damage: str, kind: str) -> TargetSource:
    """The detection / segmentation source `kind` damaged as `damage`, under `root`."""
    root.mkdir(parents=True, exist_ok=True)
    return TARGET_BUILDERS[kind](root, damage)
