"""The `wds-boxes` source: WebDataset shards whose `json` member holds each sample's boxes,
recognised by content (the first shard's first json members have a box key). The json forms read:

- lists side by side: `{"boxes" | "bbox" | "bboxes": [[4 numbers], ...], "labels" | "category_id" |
  "category_ids" | "classes": [...]}`, at the top or under `objects` (Hugging Face's
  `{"objects": {"bbox": [...], "category": [...]}}`);
- one dict per object: `{"objects" | "annotations": [{"bbox" | "box": [...], "category_id" |
  "label" | "category": ...}, ...]}`.

A box's numbers are read as the json's own `box_format` / `bbox_format` says, else as
`--box-format` says, else by its key: `boxes` xyxy (torchvision's convention), `bbox` xywh
(COCO's); `bboxes` (albumentations', any format) needs one of the first two. Formats: `xyxy`
(= `pascal_voc`), `xywh` (= `coco`), `cxcywh` in pixels; `yolo` (cx cy w h) and
`albumentations` (xyxy) normalised to the image. Labels are class indices (classes "0".."max")
or class names (sorted), one kind per dataset. Each box that cannot be stored is rejected with
its reason (`shard#key: box N`); a sample whose json is unreadable or whose boxes and labels
differ in number is rejected whole."""
from __future__ import annotations

import io
import json
import math
import os
import tarfile
from pathlib import Path
from typing import Any, BinaryIO

from PIL import Image

from ...errors import OptionError, SourceError
from ...image.masks import MAX_INSTANCES
from ...sources.folder_scan import Rejection
from ...sources.remote.urls import is_url
from .base import SourceOptions, SourceScan
from .label_targets import Targets
from .shardlist import fetch_or_reject, list_shards
from .tarread import read_shard
from .webdataset import sample_of

BOX_KEYS = ("boxes", "bbox", "bboxes")
LABEL_KEYS = ("labels", "category_id", "category_ids", "category", "classes", "label")
OBJECT_LISTS = ("objects", "annotations")
FORMAT_KEYS = ("box_format", "bbox_format")
KEY_FORMATS = {"boxes": "xyxy", "bbox": "xywh"}  # bboxes: none (albumentations writes any format under it)
BOX_FORMATS = {"xyxy": "xyxy", "pascal_voc": "xyxy", "xywh": "xywh", "coco": "xywh", "cxcywh": "cxcywh",
               "yolo": "yolo", "albumentations": "albumentations"}
EDGE_SLACK = 1.0  # pixels, as for COCO
PROBE_MEMBERS = 16


def check_box_format(value: str | None) -> str | None:
    """`--box-format` as one of BOX_FORMATS; OptionError naming them otherwise."""
    if value is not None and value not in BOX_FORMATS:
        raise OptionError(f"--box-format {value!r}: choose one of {', '.join(BOX_FORMATS)}")
    return value


def holds_boxes(src: str) -> bool:
    """Whether the first local shard of `src` has a json member with boxes (URLs: not probed; pass
    --source wds-boxes)."""
    if is_url(src):
        return False
    try:
        shards = list_shards(src)
        if not os.path.isfile(shards[0]):  # a FIFO would block here; the scan names it
            return False
        with tarfile.open(shards[0], "r:*") as tar:
            for _, info in zip(range(4 * PROBE_MEMBERS), tar):
                if info.isfile() and info.name.endswith(".json"):
                    handle = tar.extractfile(info)
                    found = _box_list(json.loads(handle.read())) if handle is not None else None
                    if found is not None:
                        return True
    except (OSError, ValueError, IndexError, tarfile.TarError, SourceError):
        return False
    return False


def _box_list(doc: Any) -> tuple[str, list[Any], list[Any] | None] | None:
    """(box key, boxes, labels or None) of a json document, or None when it holds no box list."""
    if not isinstance(doc, dict):
        return None
    for holder in (doc, doc.get("objects")):
        if isinstance(holder, dict):
            key = next((k for k in BOX_KEYS if isinstance(holder.get(k), list)), None)
            if key is not None:
                labels = next((holder[k] for k in LABEL_KEYS if isinstance(holder.get(k), list)), None)
                return key, holder[key], labels
    for name in OBJECT_LISTS:
        objects = doc.get(name)
        if isinstance(objects, list) and objects and all(isinstance(o, dict) for o in objects):
            key = next((k for k in ("bbox", "box", "boxes") if k in objects[0]), None)
            if key is not None:
                label_key = next((k for k in ("category_id", "label", "category", "class") if k in objects[0]), None)
                return ("boxes" if key == "box" else key, [o.get(key) for o in objects],
                        [o.get(label_key) for o in objects] if label_key else None)
    return None


def scan(src: str, options: SourceOptions) -> SourceScan:
    """Every sample of the shards with its valid boxes (in its image's pixels)."""
    rejected: list[Rejection] = []
    samples: list[tuple[str, str, tuple[int, int], tuple[int, int], list[dict[str, Any]]]] = []
    for shard in list_shards(src):
        local: str | Path | None = shard
        if is_url(shard):
            assert options.spool is not None, "preprocess gives remote shards a spool"
            local = fetch_or_reject(shard, options.spool, rejected)
        if local is None:
            continue
        read = read_shard(str(local), shard, options.spool)
        rejected += read.rejected
        with open(read.path, "rb") as f:
            for key, members in read.samples.items():
                name = f"{shard}#{key}"
                try:
                    image, _, doc = sample_of(f, members, "json", options.image_key)
                    size = _size(f, members[image])
                    objects = _objects(doc, size, options.box_format, name, rejected)
                except ValueError as exc:
                    rejected.append(Rejection(name, str(exc)))
                    continue
                samples.append((read.path, name, members[image], size, objects))
    names = _class_names(samples, src)
    result = SourceScan(root=str(src), kind="wds-boxes", targets=Targets(names=names), objects=[], rejected=rejected)
    for path, name, span, (width, height), objects in samples:
        for obj in objects:
            obj["label"] = names.index(obj["label"]) if isinstance(obj["label"], str) else obj["label"]
        result.add(path, name, sorted({o["label"] for o in objects}), span=span,
                   objects={"size": [width, height], "objects": objects})
    return result


def _size(f: BinaryIO, span: tuple[int, int]) -> tuple[int, int]:
    offset, size = span
    f.seek(offset)
    try:
        with Image.open(io.BytesIO(f.read(size))) as image:
            return int(image.size[0]), int(image.size[1])
    except (OSError, Image.DecompressionBombError) as exc:
        raise ValueError(f"unreadable image ({exc})") from None


def _class_names(samples: list[Any], src: str) -> list[str]:
    """Class names (sorted) when the labels are names, else "0".."max"; SourceError for a mix."""
    labels = [o["label"] for *_, objects in samples for o in objects]
    text = [label for label in labels if isinstance(label, str)]
    if text and len(text) < len(labels):
        number = next(label for label in labels if not isinstance(label, str))
        raise SourceError(f"{src}: box labels mix class names ({text[0]!r}) and indices ({number}): write one kind")
    if text:
        return sorted(set(text))
    return [str(i) for i in range(max(labels, default=-1) + 1)]


def _objects(doc: Any, size: tuple[int, int], option: str | None, name: str, rejected: list[Rejection]
             ) -> list[dict[str, Any]]:
    """The valid objects of one sample's json; ValueError (the sample rejected) when it has none to read."""
    found = _box_list(doc)
    if found is None:
        raise ValueError(f"no boxes in the json (keys {', '.join(BOX_KEYS)}, or objects with a bbox)")
    key, boxes, labels = found
    if labels is None or len(labels) != len(boxes):
        raise ValueError(f"malformed json ({len(boxes)} boxes and "
                         f"{'no' if labels is None else len(labels)} labels: keys {', '.join(LABEL_KEYS)})")
    given = next((doc[k] for k in FORMAT_KEYS if isinstance(doc, dict) and k in doc), None)
    form = BOX_FORMATS.get(str(given)) if given is not None else option or KEY_FORMATS.get(key)
    if form is None:
        raise SourceError(f"{name}: boxes under {key!r} may be xyxy or xywh: pass --box-format "
                          f"({'|'.join(BOX_FORMATS)}) or write box_format in each json")
    objects: list[dict[str, Any]] = []
    for k, (box, label) in enumerate(zip(boxes, labels)):
        obj, reason = _object(box, label, form, size)
        if reason is not None:
            rejected.append(Rejection(f"{name}: box {k}", reason))
        elif len(objects) >= MAX_INSTANCES:
            rejected.append(Rejection(f"{name}: box {k}", f"more than {MAX_INSTANCES} objects on one image"))
        else:
            objects.append(obj)
    return objects


def _object(box: Any, label: Any, form: str, size: tuple[int, int]) -> tuple[dict[str, Any], str | None]:
    """One box as {box (xyxy pixels, clipped), label, iscrowd, segmentation}, or why it is rejected."""
    if not (isinstance(box, list) and len(box) == 4 and all(isinstance(v, (int, float)) and not isinstance(v, bool)
                                                            and math.isfinite(v) for v in box)):
        return {}, f"malformed box ({json.dumps(box)[:40]}: need 4 numbers, {form})"
    if isinstance(label, bool) or not (isinstance(label, int) and label >= 0 or isinstance(label, str) and label):
        return {}, f"unknown class ({json.dumps(label)[:30]}: a class index >= 0 or a class name)"
    width, height = size
    a, b, c, d = (float(v) for v in box)
    xyxy = {"xyxy": (a, b, c, d), "xywh": (a, b, a + c, b + d),
            "cxcywh": (a - c / 2, b - d / 2, a + c / 2, b + d / 2),
            "yolo": ((a - c / 2) * width, (b - d / 2) * height, (a + c / 2) * width, (b + d / 2) * height),
            "albumentations": (a * width, b * height, c * width, d * height)}[form]
    x0, y0, x1, y1 = xyxy
    if x1 - x0 <= 0 or y1 - y0 <= 0:
        return {}, f"zero area box ({x1 - x0:g}x{y1 - y0:g} px, read as {form})"
    if x0 < -EDGE_SLACK or y0 < -EDGE_SLACK or x1 > width + EDGE_SLACK or y1 > height + EDGE_SLACK:
        return {}, f"box outside the image ([{x0:g}, {y0:g}, {x1:g}, {y1:g}] in {width}x{height}, read as {form})"
    clipped = [max(0.0, x0), max(0.0, y0), min(float(width), x1), min(float(height), y1)]
    return {"box": clipped, "label": label, "iscrowd": 0, "segmentation": []}, None

