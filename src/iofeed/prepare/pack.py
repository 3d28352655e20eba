"""Prepared files packed in write order into each split's WebDataset shards, its sample table and
its targets side file."""
from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ..format.captions import CAPTION_MEMBER, captions_entry, save_captions
from ..format.manifest import SplitInfo
from ..format.policy import ImagePolicy
from ..format.shards import ShardWriter
from ..format.table import ENCODINGS, MEMBER_EXTENSIONS, new_table, save_table
from ..format.targets import TEXT_KIND, save_targets
from ..runtime.progress import progress as progress_bar
from ..sources.folder_scan import Rejection, display_path
from . import box_pack
from .box_pack import MASK_WRITERS, SplitObjects, store_objects
from .file import Prepared, Task
from .sources.base import SourceScan
from .sources.label_targets import Resolved

CLASSES_MEMBER = "classes.json"  # a multi-label sample's class indices, a JSON list
EXTRA_MEMBER = "json"  # a sample's extra, any JSON value (WebDataset's metadata convention)


@dataclass
class PackResult:
    """What packing wrote: each split's shards and table, the files rejected while preparing, each
    written sample's facts, and the manifest's targets entry."""


    splits: dict[str, SplitInfo]
    rejected: list[Rejection]
    facts: list[dict[str, Any]]
    targets: dict[str, Any]


def pack(
    scan: SourceScan,
    targets: Resolved,
    orders: dict[str, np.ndarray],
    policy: ImagePolicy,
    staging: Path,
    shard_bytes: int,
    progress: bool,
    run_engine: Callable[[list[Task]], AbstractContextManager[Iterator[Prepared]]],
) -> PackResult:
    """Prepare every file in parallel, in write order, and append it to its split's shards."""
    writers = {name: ShardWriter(staging, name, max_bytes=shard_bytes) for name in orders}
    tables = {name: new_table(len(order)) for name, order in orders.items()}
    sources: dict[str, list[str]] = {name: [] for name in orders}
    tasks = [(int(i), scan.paths[i], policy, scan.spans[i]) for order in orders.values() for i in order]
    side: dict[str, list[Any]] = {name: [] for name in orders}  # per split: each row's classes and extra
    captions: dict[str, list[str]] = {name: [] for name in orders}  # per split: each row's caption (--target text)
    kind = targets.kind
    split_of = {int(i): name for name, order in orders.items() for i in order}
    rejected: list[Rejection] = []
    facts: list[dict[str, Any]] = []
    objects = {name: SplitObjects() for name in orders} if scan.objects is not None else None
    masks = scan.objects is not None and any(o.get("segmentation") for spec in scan.objects if spec
                                             for o in spec["objects"])
    semantic = scan.objects is not None and any(spec and "label_map" in spec for spec in scan.objects)
    with run_engine(tasks) as results:
        for prepared in progress_bar(results, total=len(tasks), unit="img", desc="preprocess", disable=not progress):
            rel = scan.names[prepared.index]
            if prepared.data is None:
                rejected.append(Rejection(rel, prepared.reason or "unknown"))
                continue
            name = split_of[prepared.index]
            label = targets.label(prepared.index)
            classes, extra = targets.classes[prepared.index], targets.extras[prepared.index]
            members = {MEMBER_EXTENSIONS[prepared.encoding]: prepared.data}
            if kind == "class":
                members["cls"] = str(label).encode()
            elif kind == "multi_label":
                members[CLASSES_MEMBER] = json.dumps(classes).encode()
            if scan.captions is not None:
                members[CAPTION_MEMBER] = scan.captions[prepared.index].encode("utf-8")
                captions[name].append(scan.captions[prepared.index])
            if extra is not None:
                members[EXTRA_MEMBER] = json.dumps(extra).encode()
            stored = None
            if objects is not None and scan.objects is not None:
                stored, reason = _stored(scan.objects[prepared.index], prepared.facts, masks)
                if stored is None:
                    rejected.append(Rejection(rel, reason))
                    continue
                members = {**{k: members.pop(k) for k in list(members)[:1]}, **stored.members(), **members}
            shard, offset, size = writers[name].add(f"{prepared.index:07d}", members)
            if stored is not None and objects is not None:
                objects[name].add(stored, offset, size, len(members.get(MASK_WRITERS[box_pack.MASK_FORM][0], b"")))
            if targets.side_file:
                side[name].append([classes, extra])
            row = tables[name][len(sources[name])]
            row["shard"], row["offset"], row["size"], row["label"] = shard, offset, size, label
            row["encoding"] = ENCODINGS.index(prepared.encoding)
            row["width"], row["height"] = prepared.facts["width"], prepared.facts["height"]
            sources[name].append(display_path(rel))
            facts.append({**prepared.facts, "encoding": prepared.encoding, "stored_bytes": size,
                          "name": display_path(rel), "split": name, "classes": tuple(classes)})
    splits = {}
    for name, writer in writers.items():
        shards = writer.close()
        table_name = f"{name}-samples.npy"
        save_table(staging / table_name, tables[name][: len(sources[name])], sources[name])
        splits[name] = SplitInfo(
            samples=len(sources[name]), shards=[asdict(s) for s in shards], table=table_name
        )
    files = {}
    if targets.side_file:
        for name, rows in side.items():
            files[name] = save_targets(staging, name, rows)
    entry = targets.manifest_entry(files)
    if scan.captions is not None:
        entry["kind"] = TEXT_KIND
        entry["captions"] = captions_entry({name: save_captions(staging, name, texts)
                                            for name, texts in captions.items()})
    if objects is not None:
        saved = {name: objects[name].save(staging, name) for name in orders}
        entry["boxes"] = {"files": {n: f["boxes"] for n, f in saved.items()},
                          "masks": {n: f["masks"] for n, f in saved.items() if "masks" in f},
                          **({"mask_form": box_pack.MASK_FORM} if box_pack.MASK_FORM != "png" else {}),
                          **({"semantic": True} if semantic else {})}  # masks of class ids, no boxes
    return PackResult(splits, rejected, facts, entry)


def _stored(spec: dict[str, Any], facts: dict[str, Any], masks: bool) -> tuple[Any, str]:
    """A detection sample's targets at its stored size, or None and why they cannot be: the file's
    size is not the one its annotations give (the boxes would land elsewhere)."""
    annotated = spec["size"]
    if [facts["width_in"], facts["height_in"]] != annotated or facts.get("oriented"):
        return None, (f"image size differs from its annotations (file {facts['width_in']}x{facts['height_in']}"
                      f"{', EXIF-rotated' if facts.get('oriented') else ''}, annotated {annotated[0]}x{annotated[1]})")
    try:
        return store_objects(spec, int(facts["width"]), int(facts["height"]), masks), ""
    except ValueError as exc:  # a label map changed since the scan
        return None, str(exc)
