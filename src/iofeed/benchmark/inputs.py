"""The two forms of the data a benchmark reads — image folder and iofeed dataset — and the page cache."""
from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from pathlib import Path

from tqdm import tqdm

from ..dataset import is_iofeed_dataset
from ..manifest import Manifest
from ..sources import find_class_root
from .options import DEFAULT_SOURCE


@dataclass
class Inputs:
    """Where each form of the data is (None: not available, with the reason in `missing`)."""

    folder: Path | None
    dataset: Path | None
    missing: dict[str, str] = field(default_factory=dict)  # "folder"/"dataset" -> why it is absent
    notes: list[str] = field(default_factory=list)  # what was made on the way


def resolve_inputs(source: Path | None, need_dataset: bool, progress: bool = True) -> Inputs:
    """Folder and dataset for `source`, making the stand-in or the dataset when needed.

    No source: the Caltech-256 stand-in in data/c256 (made if missing). A folder: its
    dataset is FOLDER.iof beside it (preprocessed if missing and `need_dataset`). A dataset:
    its folder is the manifest's source path, if it still exists.
    """
    if source is None:
        source = DEFAULT_SOURCE
        if not source.exists():
            from ..synth import synth_caltech256

            print(f"iofeed bench: no SOURCE given and {source} is missing: making the Caltech-256 stand-in there")
            summary = synth_caltech256(source, progress=progress)
            note = f"made the stand-in ({summary.images} images) in {source} in {summary.seconds:.0f} s"
            return _with_dataset(Inputs(source, None, notes=[note]), source, need_dataset, progress)
    source = Path(source)
    if is_iofeed_dataset(source):
        folder = Path(Manifest.read(source).source.get("path", ""))
        if folder.is_dir():
            return Inputs(folder, source)
        return Inputs(None, source, {"folder": f"the dataset's source folder {folder} no longer exists"})
    return _with_dataset(Inputs(source, None), source, need_dataset, progress)


def _with_dataset(inputs: Inputs, folder: Path, need_dataset: bool, progress: bool) -> Inputs:
    """Add FOLDER.iof, preprocessing it first when it is missing and needed."""
    from ..preprocess import default_output, preprocess

    dataset = default_output(folder)
    if not is_iofeed_dataset(dataset):
        if not need_dataset:
            inputs.missing["dataset"] = f"{dataset} does not exist (no selected feed needs it)"
            return inputs
        print(f"iofeed bench: preprocessing {folder} into {dataset} (once; the dataset feeds read it)")
        summary = preprocess(folder, dataset, progress=progress)
        inputs.notes.append(f"preprocessed {folder} into {dataset} in {summary.seconds:.0f} s")
    inputs.dataset = dataset
    return inputs


def data_files(inputs: Inputs) -> list[Path]:
    """Every file a feed may read: the folder's images and the dataset's shards."""
    files: list[Path] = []
    if inputs.folder is not None:
        for top, _dirs, names in os.walk(find_class_root(inputs.folder)):
            files.extend(Path(top, n) for n in names)
    if inputs.dataset is not None:
        files.extend(p for p in Path(inputs.dataset).iterdir() if p.is_file())
    return files


@dataclass(frozen=True)
class CacheState:
    """Whether the data was read once before measuring ("warm") or left as found."""

    state: str  # "warm" or "as found"
    files: int
    bytes: int
    seconds: float


def warm_page_cache(files: list[Path], progress: bool = True) -> CacheState:
    """Read every file once, so that every feed reads from the page cache alike."""
    start, total = time.perf_counter(), 0
    for path in tqdm(files, unit="file", desc="warming page cache", disable=not progress, mininterval=0.5):
        try:
            with open(path, "rb", buffering=0) as f:
                while chunk := f.read(1 << 20):
                    total += len(chunk)
        except OSError:
            continue  # unreadable files are the feeds' business
    return CacheState("warm", len(files), total, time.perf_counter() - start)
