"""The `yolo` source: `images/` + `labels/*.txt` (Ultralytics / darknet layout; split folders
`images/train` + `labels/train` or `train/images` + `train/labels` alike), recognised by content:
label files whose rows read `class cx cy w h` (normalised to the image), or `class x1 y1 x2 y2 ...`
(a normalised polygon: YOLO segmentation labels, kept as the object's mask, its box the
polygon's extent). Class names from `data.yaml` / `dataset.yaml` (`names:` as a list or an
index map), else `classes.txt` / `obj.names` (one a line), else "0".."max".

An image without a label file is a background image (YOLO's convention): kept, with no objects,
and counted in the summary's note. Every row that cannot be stored is rejected with its reason
(`labels/x.txt:LINE` in rejected.jsonl): malformed, unknown class, zero area, outside the image."""
from __future__ import annotations

import importlib
import math
import re
from pathlib import Path
from typing import Any

from ...errors import SourceError
from ...image.masks import MAX_INSTANCES
from ...sources.folder_scan import Rejection
from .base import SourceOptions, SourceScan
from .image_pairs import PairedFolder, annotation_of, first_files, image_files, image_size, paired_folders
from .label_targets import Targets

IMAGE_DIRS, LABEL_DIRS = ("images",), ("labels",)
NAME_FILES = ("data.yaml", "dataset.yaml", "data.yml")
LIST_FILES = ("classes.txt", "obj.names")
EDGE_SLACK = 1.0  # pixels, as for COCO: rounding past an edge is clipped, more is rejected
PROBE_FILES = 20


def yolo_folders(path: Path) -> list[PairedFolder]:
    """The image/label folder pairs of a YOLO set at `path`, or [] when its label files are not
    YOLO rows (the first non-empty one decides)."""
    pairs = paired_folders(path, IMAGE_DIRS, LABEL_DIRS)
    for pair in pairs:
        for label in first_files(pair.annotations, ".txt", PROBE_FILES):
            rows = [r for r in label.read_text(errors="replace").splitlines() if r.strip()]
            if rows:
                return pairs if _is_yolo_like(rows[0]) else []
    return []


def _is_yolo_like(row: str) -> bool:
    fields = row.split()
    return len(fields) >= 5 and re.fullmatch(r"\d+", fields[0]) is not None


def class_names(root: Path) -> list[str] | None:
    """The class names a YOLO set declares, by index; None when it declares none."""
    for name in NAME_FILES:
        if (root / name).is_file():
            return _yaml_names(root / name)
    for name in LIST_FILES:
        if (root / name).is_file():
            return [line.strip() for line in (root / name).read_text().splitlines() if line.strip()]
    return None


def _yaml_names(path: Path) -> list[str] | None:
    """`names:` of a data.yaml: with PyYAML when installed, else the two forms Ultralytics writes
    (an inline or block list; a block `index: name` map)."""
    text = path.read_text()
    try:
        yaml = importlib.import_module("yaml")  # PyYAML when installed (not a dependency)
    except ImportError:
        names = _plain_names(text)
    else:
        try:
            document = yaml.safe_load(text)
        except yaml.YAMLError as exc:
            raise SourceError(f"{path}: unreadable YAML ({str(exc).splitlines()[0]}): fix it, or give the class "
                              "names in classes.txt") from None
        names = document.get("names") if isinstance(document, dict) else None
    if isinstance(names, dict):
        if not all(isinstance(k, int) for k in names) or sorted(names) != list(range(len(names))):
            raise SourceError(f"{path}: `names` must map the indices 0..{len(names) - 1} to names")
        names = [names[k] for k in range(len(names))]
    if names is None:
        return None
    if not isinstance(names, list) or not names:
        raise SourceError(f"{path}: `names` must be a list of class names or an index: name map")
    return [str(n) for n in names]


def _plain_names(text: str) -> list[str] | dict[int, str] | None:
    lines = text.splitlines()
    for at, line in enumerate(lines):
        match = re.match(r"names\s*:\s*(.*)$", line)
        if not match:
            continue
        inline = match.group(1).split("#")[0].strip()
        if inline.startswith("["):
            return [_unquote(v) for v in inline.strip("[]").split(",") if v.strip()]
        items: list[str] = []
        mapped: dict[int, str] = {}
        for row in lines[at + 1:]:
            if row.strip() and not row[0].isspace() and not row.startswith("-"):
                break
            entry = row.split("#")[0].strip()
            if entry.startswith("-"):
                items.append(_unquote(entry[1:]))
            elif (pair := re.match(r"(\d+)\s*:\s*(.+)$", entry)) is not None:
                mapped[int(pair.group(1))] = _unquote(pair.group(2))
        return mapped or items
    return None


def _unquote(value: str) -> str:
    return value.strip().strip("'\"")


def scan(src: str, options: SourceOptions) -> SourceScan:
    """Every image of the set with its valid objects (boxes in the image's pixels)."""
    root = Path(src)
    pairs = yolo_folders(root)
    if not pairs:
        raise SourceError(f"{src}: no YOLO layout found (images/ beside labels/ with `class cx cy w h` rows)")
    names = class_names(root)
    rejected: list[Rejection] = []
    samples: list[tuple[Path, str, list[dict[str, Any]], tuple[int, int]]] = []
    background = 0
    for pair in pairs:
        for image in image_files(pair, root, rejected):
            rel = image.relative_to(root).as_posix()
            size = image_size(image)
            if size is None:
                rejected.append(Rejection(rel, "unreadable image header"))
                continue
            label = annotation_of(pair, image, ".txt")
            if not label.is_file():
                background += 1
                samples.append((image, rel, [], size))
                continue
            objects = _objects(label, label.relative_to(root).as_posix(), size, names, rejected)
            samples.append((image, rel, objects, size))
    if names is None:
        top = max((o["label"] for _, _, objs, _ in samples for o in objs), default=-1)
        names = [str(i) for i in range(top + 1)]
    result = SourceScan(root=str(root), kind="yolo", targets=Targets(names=names), objects=[], rejected=rejected)
    for image, rel, objects, (width, height) in samples:
        result.add(str(image), rel, sorted({o["label"] for o in objects}),
                   objects={"size": [width, height], "objects": objects})
    if background:
        result.notes.append(f"{background:,} images without a label file, kept as background (no objects)")
    return result


def _objects(label: Path, rel: str, size: tuple[int, int], names: list[str] | None,
             rejected: list[Rejection]) -> list[dict[str, Any]]:
    """The valid objects of one label file; each invalid row rejected as `rel:LINE`."""
    objects: list[dict[str, Any]] = []
    for number, line in enumerate(label.read_text(errors="replace").splitlines(), 1):
        if not line.strip():
            continue
        parsed, reason = _row(line)
        obj = None
        if parsed is not None:
            obj, reason = _object(parsed, size, names)
        if obj is None:
            rejected.append(Rejection(f"{rel}:{number}", reason or "malformed row"))
        elif len(objects) >= MAX_INSTANCES:
            rejected.append(Rejection(f"{rel}:{number}", f"more than {MAX_INSTANCES} objects on one image (the "
                                                         "instance-id map holds 255)"))
        else:
            objects.append(obj)
    return objects


def _row(line: str) -> tuple[tuple[int, list[float]] | None, str | None]:
    """(class, normalised numbers) of a row, or the reason it is malformed."""
    fields = line.split()
    shown = line.strip()[:60]
    if len(fields) < 5 or (len(fields) > 5 and (len(fields) - 1) % 2):
        return None, f"malformed row ({shown!r}: need `class cx cy w h` or `class x1 y1 x2 y2 x3 y3 ...`)"
    try:
        values = [float(v) for v in fields[1:]]
    except ValueError:
        return None, f"malformed row ({shown!r}: coordinates must be numbers)"
    if not re.fullmatch(r"-?\d+", fields[0]) or not all(math.isfinite(v) for v in values):
        return None, f"malformed row ({shown!r}: the class must be an integer, coordinates finite)"
    return (int(fields[0]), values), None


def _object(parsed: tuple[int, list[float]], size: tuple[int, int], names: list[str] | None
            ) -> tuple[dict[str, Any] | None, str | None]:
    """One row as {box (xyxy pixels, clipped), label, iscrowd, segmentation}, or why it is rejected."""
    label, values = parsed
    width, height = size
    if label < 0 or (names is not None and label >= len(names)):
        return None, f"unknown class ({label}; {len(names) if names is not None else 0} classes are named)"
    segmentation: list[list[float]] = []
    if len(values) == 4:
        cx, cy, w, h = values
        box = [(cx - w / 2) * width, (cy - h / 2) * height, (cx + w / 2) * width, (cy + h / 2) * height]
    else:
        xs, ys = [v * width for v in values[0::2]], [v * height for v in values[1::2]]
        box = [min(xs), min(ys), max(xs), max(ys)]
        segmentation = [[c for xy in zip(xs, ys) for c in xy]]
    if box[2] - box[0] <= 0 or box[3] - box[1] <= 0:
        return None, f"zero area box ({box[2] - box[0]:g}x{box[3] - box[1]:g} px)"
    if box[0] < -EDGE_SLACK or box[1] < -EDGE_SLACK or box[2] > width + EDGE_SLACK or box[3] > height + EDGE_SLACK:
        return None, f"box outside the image ([{', '.join(f'{v:.1f}' for v in box)}] in {width}x{height})"
    clipped = [max(0.0, box[0]), max(0.0, box[1]), min(float(width), box[2]), min(float(height), box[3])]
    return {"box": clipped, "label": label, "iscrowd": 0, "segmentation": segmentation}, None
