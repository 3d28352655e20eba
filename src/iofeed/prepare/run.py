"""`iofeed preprocess`: validate → RGB → resize → split → pack into indexed WebDataset shards."""
from __future__ import annotations

import json
import time
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from .. import __version__
from ..errors import IofeedError, OptionError
from ..format.manifest import Manifest
from ..format.policy import ImagePolicy
from ..sources.folder_scan import Rejection, display_path, none_accepted, reason_kind
from ..sources.remote.urls import is_url
from .duplicates import Duplicates, find_duplicates
from .executors import select_engine
from .file import Prepared, Task
from .output import check_inputs, check_output, spool_dir, written_aside
from .pack import pack
from .sources.base import SourceOptions, SourceScan
from .sources.kinds import scan_source
from .sources.label_targets import Resolved
from .sources.one_sample_classes import one_sample_note
from .sources.webdataset import image_keys
from .sources.webdataset_boxes import check_box_format
from .splits import validation_mask, write_order
from .stats import source_stats

REJECTED_NAME = "rejected.jsonl"
TARGETS = ("class", "text")  # what preprocess keeps as each sample's target: its label, or its caption


@dataclass
class PreprocessSummary:
    """What a preprocess run did."""

    out: Path | str  # a URL once uploaded (`upload.preprocess_to_url`)
    found: int
    written: dict[str, int]
    rejected: dict[str, int]
    bytes_in: int
    bytes_out: int
    seconds: float
    empty_classes: list[str] = field(default_factory=list)  # class folders without an image (no samples)
    stale_removed: list[Path] = field(default_factory=list)  # what interrupted runs had left beside OUT
    several_classes: int = 0  # samples with more than one class (a multi-label dataset)
    several_example: str = ""  # the first of them and its classes
    duplicates: Duplicates = field(default_factory=Duplicates)  # images stored under several samples
    one_sample_classes: str = ""  # a note when most classes have one sample (captions taken as classes?)
    notes: list[str] = field(default_factory=list)  # the source's counted cases (YOLO background images)

    @property
    def images_per_sec(self) -> float:
        """Accepted-or-rejected images handled per second."""
        return self.found / self.seconds if self.seconds > 0 else 0.0


def default_output(src: Path | str) -> Path:
    """`caltech256/` → `caltech256.iof` beside it; OptionError for URLs and shard patterns."""
    if is_url(src) or any(c in str(src) for c in "{*?["):
        raise OptionError(f"give -o OUT for {src}: a URL or pattern has no folder to put the dataset beside")
    src = Path(src).resolve()
    return src.with_name(src.name + ".iof")


def preprocess(
    src: Path | str,
    out: Path | None = None,
    *,
    policy: ImagePolicy = ImagePolicy(shorter_side=None),
    seed: int = 0,
    val_per_class: int | None = None,
    val_fraction: float | None = None,
    shard_bytes: int = 128 << 20,
    workers: int | None = None,
    overwrite: bool = False,
    strict: bool = False,
    progress: bool = True,
    engine: str = "local",
    address: str | None = None,
    source: str = "auto",
    labels: Path | None = None,
    label_column: str | None = None,
    image_column: str | None = None,
    image_key: str | tuple[str, ...] | None = None,
    label_names: bool = False,
    box_format: str | None = None,
    target: str = "class",
) -> PreprocessSummary:
    """Prepare `src` once into an iofeed dataset at `out` (written aside, then renamed).

    `engine="local"` prepares files in a process pool of `workers` processes; `engine="ray"`
    spreads them as Ray Data tasks over the Ray cluster at `address` (a local one of `workers`
    CPUs when None). Both give the same dataset: shard assignment and write order are fixed
    before the work is spread. `source` is the kind of input (`sources.registry.SOURCES`; "auto"
    recognises it by content); `labels`, `label_column`, `image_column` and `image_key` (WebDataset
    image member extensions, the first present wins) tell it where the targets and images are;
    `label_names` takes every label as a class name as written; `target="text"` keeps each WebDataset
    sample's caption as its target (no classes: docs/formats.md, "Captions"). Bytes a source must copy out
    (Parquet cells, remote shards, decompressed tars) go to a spool folder beside OUT, removed at
    the end.
    """
    policy.check()
    if target not in TARGETS:
        raise OptionError(f"--target must be one of {', '.join(TARGETS)}, got {target!r}")
    run_engine = select_engine(engine, address)
    out = Path(out) if out is not None else default_output(src)
    if shard_bytes < 1 << 16:
        raise OptionError(f"shard size must be at least 64 KiB, got {shard_bytes} bytes")
    if not isinstance(seed, (int, np.integer)) or seed < 0:
        raise OptionError(f"--seed must be an integer >= 0, got {seed!r}")
    if labels is not None:  # before check_output: the more precise refusal
        check_inputs(out, [labels], "--labels")
    check_output(src, out, overwrite)
    start = time.perf_counter()
    with spool_dir(out) as spool:
        options = SourceOptions(labels=None if labels is None else Path(labels), label_column=label_column,
                                image_column=image_column, image_key=image_keys(image_key), spool=Path(spool),
                                label_names=label_names, box_format=check_box_format(box_format),
                                target=target)
        scan = scan_source(src, options, source)
        policy = policy.for_source(scan.kind)
        return _preprocess(scan, src, out, start, policy=policy, seed=seed, val_per_class=val_per_class,
                           val_fraction=val_fraction, shard_bytes=shard_bytes, overwrite=overwrite, strict=strict,
                           progress=progress, label_names=label_names,
                           run_engine=lambda tasks: run_engine(tasks, workers=workers, address=address))


def _preprocess(scan: SourceScan, src: Path | str, out: Path, start: float, *, policy: ImagePolicy, seed: int,
                val_per_class: int | None, val_fraction: float | None, shard_bytes: int, overwrite: bool,
                strict: bool, progress: bool,
                run_engine: Callable[[list[Task]], AbstractContextManager[Iterator[Prepared]]],
                label_names: bool = False) -> PreprocessSummary:
    """Split, prepare and pack a scanned source into OUT (written aside, then swapped in)."""
    if strict and scan.rejected:
        _fail_strict(scan.rejected)
    targets = scan.targets.resolve()
    labels = np.asarray([targets.label(i) for i in range(len(scan))], dtype=np.int64)
    # samples split per class (a multi-label one by its first class; those without a class as one more group)
    is_val = validation_mask(np.where(labels >= 0, labels, len(targets.names)), seed, val_per_class, val_fraction)
    orders = {
        "train": write_order(np.flatnonzero(~is_val), seed, shuffle=True),
        "val": write_order(np.flatnonzero(is_val), seed, shuffle=False),
    }
    orders = {name: order for name, order in orders.items() if len(order)}
    with written_aside(src, out, overwrite) as (staging, stale):
        results = pack(scan, targets, orders, policy, staging, shard_bytes, progress, run_engine)
        rejected = scan.rejected + results.rejected
        if strict and rejected:
            _fail_strict(rejected)
        if not any(info.samples for info in results.splits.values()):
            _fail_empty(scan.root, rejected)
        write_rejected(staging / REJECTED_NAME, rejected)
        seconds = time.perf_counter() - start
        manifest = Manifest(
            classes=targets.names,
            class_dirs=scan.class_dirs if scan.class_dirs is not None else targets.names,
            splits=results.splits,
            image={"encoding": policy.format, "progressive": False, "colour": "RGB",
                   "shorter_side": policy.shorter_side, "quality": policy.quality,
                   "raw_max_pixels": policy.raw_max_pixels if policy.format == "mixed" else None},
            split_policy={"seed": seed, "val_per_class": val_per_class, "val_fraction": val_fraction},
            source=source_stats(scan, results.facts, rejected),
            created_by=f"iofeed {__version__}",
            targets=results.targets,
        )
        manifest.write(staging)
    return PreprocessSummary(
        out=out,
        found=len(scan) + len(scan.rejected),
        written={name: info.samples for name, info in results.splits.items()},
        rejected=dict(Counter(reason_kind(r.reason) for r in rejected)),
        bytes_in=sum(f["bytes_in"] for f in results.facts),
        bytes_out=sum(s["bytes"] for info in results.splits.values() for s in info.shards),
        seconds=seconds,
        empty_classes=scan.empty_classes,
        stale_removed=stale,
        **_several_classes(scan, targets),
        one_sample_classes=one_sample_note(scan.kind, targets, scan.names, str(src), label_names),
        notes=scan.notes,
        duplicates=find_duplicates([(f["digest"], f["name"], f["split"], f["classes"]) for f in results.facts]),
    )


def _several_classes(scan: SourceScan, targets: Resolved) -> dict[str, Any]:
    """How many samples have several classes, and the first with its class names: one path listed
    twice with two labels makes the whole dataset multi-label, so the summary says so."""
    several = [i for i, classes in enumerate(targets.classes) if len(classes) > 1]
    if not several:
        return {}
    first = several[0]
    names = ", ".join(targets.names[c] for c in targets.classes[first])
    return {"several_classes": len(several), "several_example": f"{display_path(scan.names[first])}: {names}"}


def write_rejected(path: Path, rejected: list[Rejection]) -> None:
    """One JSON line per rejected input, sorted by path."""
    lines = [
        json.dumps({"path": display_path(r.path), "reason": r.reason})
        for r in sorted(rejected, key=lambda r: r.path)
    ]
    path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")


def _fail_strict(rejected: list[Rejection]) -> None:
    first = rejected[0]
    raise IofeedError(
        f"--strict: {len(rejected)} input(s) rejected, first {display_path(first.path)}: "
        f"{first.reason} (fix or remove them, or drop --strict)"
    )


def _fail_empty(root: str, rejected: list[Rejection]) -> None:
    """SourceError: every file was rejected, so there is no dataset to write (OUT is left as it was)."""
    raise none_accepted(f"every file in {display_path(root)} was rejected, nothing written: fix the files and run "
                        "again", rejected)
