"""The source kinds `iofeed preprocess` reads (a registry), and which one an input is, by content."""
from __future__ import annotations

import glob
import os
from dataclasses import dataclass
from pathlib import Path

from ...errors import OptionError, SourceError
from ...runtime.registry import Entry, Registry
from ...sources.folder_scan import none_accepted
from ...sources.remote.urls import is_url
from .base import SourceOptions, SourceScan
from .coco import coco_files
from .segmentation import segmentation_folders
from .tables import is_hf_dataset, is_parquet
from .tarread import is_tar
from .webdataset_boxes import holds_boxes
from .webdataset_captions import scan_captions
from .yolo import yolo_folders


@dataclass(frozen=True)
class SourceCaps:
    """What a source kind reads."""

    urls: bool  # s3://, gs://, http(s):// inputs
    labels_file: bool  # takes its targets from --labels
    label_column: bool = True  # --label-column names where its label is (a class folder's is its folder)
    image_column: bool = False  # --image-column names its image column (tables)


# An entry's target is `scan(src: str, options: SourceOptions) -> SourceScan`.
SOURCES: Registry[SourceCaps] = Registry("source", {
    "folder": Entry("iofeed.prepare.sources.folder:scan", SourceCaps(urls=False, labels_file=False,
                                                                     label_column=False)),
    "webdataset": Entry("iofeed.prepare.sources.webdataset:scan", SourceCaps(urls=True, labels_file=False)),
    "parquet": Entry("iofeed.prepare.sources.tables:scan_parquet",
                     SourceCaps(urls=False, labels_file=False, image_column=True), extra="parquet"),
    "hf": Entry("iofeed.prepare.sources.tables:scan_hf", SourceCaps(urls=False, labels_file=False, image_column=True),
                extra="hf"),
    "labels": Entry("iofeed.prepare.sources.labelfile:scan", SourceCaps(urls=False, labels_file=True)),
    "coco": Entry("iofeed.prepare.sources.coco:scan", SourceCaps(urls=False, labels_file=False, label_column=False)),
    "yolo": Entry("iofeed.prepare.sources.yolo:scan", SourceCaps(urls=False, labels_file=False, label_column=False)),
    "wds-boxes": Entry("iofeed.prepare.sources.webdataset_boxes:scan",
                       SourceCaps(urls=True, labels_file=False, label_column=False)),
    "segmentation": Entry("iofeed.prepare.sources.segmentation:scan",
                          SourceCaps(urls=False, labels_file=False, label_column=False)),
})


def detect(src: str, options: SourceOptions) -> str:
    """The source kind of `src`, from its content (never from file names): see `SOURCES`."""
    kind = _detect(src, options)
    if kind == "webdataset" and options.label_column is None and options.target != "text" and holds_boxes(src):
        return "wds-boxes"
    return kind


def _detect(src: str, options: SourceOptions) -> str:
    if options.labels is not None:
        return "labels"
    if is_url(src) or "{" in src or glob.has_magic(src):
        return "webdataset"
    path = Path(src)
    if path.is_file():
        if is_tar(path):
            return "webdataset"
        if is_parquet(path):
            return "parquet"
        raise SourceError(f"{src} is neither a tar shard nor a Parquet file (pass a folder, shards or Parquet)")
    if not path.is_dir():
        raise SourceError(f"source not found: {src}")
    if is_hf_dataset(path):
        return "hf"
    if coco_files(path):
        return "coco"
    if yolo_folders(path):
        return "yolo"
    if segmentation_folders(path):
        return "segmentation"
    files = [e.path for e in os.scandir(path) if e.is_file() and not e.name.startswith(".")]
    if any(is_parquet(f) for f in files):
        if any(is_tar(f) for f in files) and options.target == "text":
            return "webdataset"  # img2dataset's output folder: shards, and each one's metadata as Parquet
        if any(is_tar(f) for f in files):
            raise SourceError(f"{src} holds both Parquet files and tar shards: pass one kind (a Parquet file, "
                              "or the shards as a glob or brace list)")
        return "parquet"
    has_dirs = any(e.is_dir() and not e.name.startswith(".") for e in os.scandir(path))
    if not has_dirs and files and any(is_tar(f) for f in files):
        return "webdataset"
    return "folder"


def scan_source(src: str | Path, options: SourceOptions, kind: str = "auto") -> SourceScan:
    """Scan `src` as source `kind` ("auto": recognised by content) into a `SourceScan`."""
    src = str(src)
    kind = detect(src, options) if kind == "auto" else kind
    entry = SOURCES[kind]
    if is_url(src) and not entry.caps.urls:
        raise SourceError(f"{src}: the {kind} source reads local paths only "
                          f"(URLs: {', '.join(SOURCES.having('urls'))})")
    if options.labels is not None and not entry.caps.labels_file:
        raise SourceError(f"--labels is for a folder of images, not a {kind} source")
    if options.target == "text" and kind != "webdataset":
        raise OptionError(f"--target text reads image-text WebDataset shards (img2dataset's jpg + txt/json), not "
                          f"a {kind} source ({src}): leave --target out")
    if options.label_names and options.target == "text":
        raise OptionError("--label-names makes classes of the labels, --target text keeps captions: pass one")
    if options.image_key and kind not in ("webdataset", "wds-boxes"):
        raise SourceError(f"--image-key is for WebDataset shards, not a {kind} source (Parquet: --image-column)")
    for option, value, cap in (("--label-column", options.label_column, "label_column"),
                               ("--label-names", "" if options.label_names else None, "label_column"),
                               ("--image-column", options.image_column, "image_column")):
        if value is not None and not getattr(entry.caps, cap):
            given = f"{option} {value}" if value else option
            raise OptionError(f"{given}: {src} is a {kind} source, where it does not apply ({option} is for "
                              f"{', '.join(SOURCES.having(cap))} sources)")
    if options.box_format is not None and kind != "wds-boxes":
        raise OptionError(f"--box-format is for WebDataset shards with boxes (wds-boxes), not a {kind} source")
    try:
        # --target text: the webdataset source's caption reading (`webdataset_captions`)
        scan = entry.load() if options.target != "text" else scan_captions
        scanned: SourceScan = scan(src, options)
    except SourceError as exc:
        raise _with_shard_hint(exc, src, kind) from None
    scanned.settle(options.label_names)
    if not len(scanned):
        raise none_accepted(f"no images found in {src}", scanned.rejected)
    return scanned


def _with_shard_hint(exc: SourceError, src: str, kind: str) -> SourceError:
    """`exc`, or for a folder read as class folders that holds tar shards at its top (a shard
    folder with a `logs/` beside the shards), the same error naming the shards and the fix."""
    if kind != "folder" or not os.path.isdir(src):
        return exc
    tars = sorted(e.name for e in os.scandir(src) if e.is_file() and not e.name.startswith(".") and is_tar(e.path))
    if not tars:
        return exc
    return SourceError(f"{exc}; it holds tar shards ({', '.join(tars[:2])}{', ...' if len(tars) > 2 else ''}) beside "
                       "its folders, so it was read as class folders: pass --source webdataset to read the shards")
