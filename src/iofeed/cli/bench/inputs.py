"""The forms of the data a benchmark reads — image folder, JPEG dataset, raw-pixel dataset — and the page cache."""
from __future__ import annotations

import os
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path

from ...format.manifest import Manifest
from ...runtime.progress import progress as progress_bar
from ...sources.folder_scan import find_class_root
from ...sources.samples import is_iofeed_dataset
from .options import DEFAULT_SOURCE

FORMS = {"dataset": "jpeg", "raw": "raw"}  # preprocessed forms a feed may read -> --format


@dataclass
class Inputs:
    """Where each form of the data is (None: not available, with the reason in `missing`)."""

    folder: Path | None
    dataset: Path | None
    raw: Path | None = None
    missing: dict[str, str] = field(default_factory=dict)  # form -> why it is absent
    notes: list[str] = field(default_factory=list)  # what was made on the way

    def path(self, form: str) -> Path | None:
        """The path of form "folder", "dataset" or "raw"."""
        return {"folder": self.folder, "dataset": self.dataset, "raw": self.raw}.get(form)


def preprocessed_path(folder: Path, form: str) -> Path:
    """FOLDER.iof for the JPEG dataset, FOLDER.raw.iof for the raw-pixel one, beside FOLDER."""
    from ...prepare.run import default_output

    dataset = default_output(folder)
    return dataset if form == "dataset" else dataset.with_name(f"{Path(folder).resolve().name}.raw.iof")


def resolve_inputs(source: Path | None, needed: set[str], progress: bool = True) -> Inputs:
    """Folder and preprocessed forms for `source`, making the stand-in or a form when `needed`.

    No source: the Caltech-256 stand-in in data/c256 (made if missing). A folder: its
    datasets are FOLDER.iof and FOLDER.raw.iof beside it (preprocessed if missing and needed).
    A dataset: its folder is the manifest's source path, if it still exists.
    """
    notes: list[str] = []
    if source is None:
        source = DEFAULT_SOURCE
        if not source.exists():
            from ...prepare.synth import synth_caltech256

            print(f"iofeed bench: no SOURCE given and {source} is missing: making the Caltech-256 stand-in there")
            summary = synth_caltech256(source, progress=progress)
            notes.append(f"made the stand-in ({summary.images} images) in {source} in {summary.seconds:.0f} s")
    source = Path(source)
    if is_iofeed_dataset(source):
        form = "raw" if Manifest.read(source).image.get("encoding") == "raw" else "dataset"
        folder = Path(Manifest.read(source).source.get("path", ""))
        inputs = Inputs(folder if folder.is_dir() else None, None, notes=notes)
        setattr(inputs, form, source)
        if inputs.folder is None:
            inputs.missing["folder"] = f"the dataset's source folder {folder} no longer exists"
            return inputs
    else:
        inputs = Inputs(source, None, notes=notes)
    for form in FORMS:
        if inputs.path(form) is None:
            _add_form(inputs, form, form in needed, progress)
    return inputs


def _add_form(inputs: Inputs, form: str, needed: bool, progress: bool) -> None:
    """Add the preprocessed `form` beside the folder, preprocessing it first when missing and needed."""
    from ...format.policy import ImagePolicy
    from ...prepare.run import preprocess

    folder = inputs.folder
    assert folder is not None  # `resolve_inputs` adds forms only beside a folder
    dataset = preprocessed_path(folder, form)
    if not is_iofeed_dataset(dataset):
        if not needed:
            inputs.missing[form] = f"{dataset} does not exist (no selected feed needs it)"
            return
        print(f"iofeed bench: preprocessing {folder} into {dataset} (--format {FORMS[form]}; once): "
              f"{_estimate(folder, dataset, form)}")
        summary = preprocess(folder, dataset, policy=ImagePolicy(format=FORMS[form]), progress=progress)
        inputs.notes.append(f"preprocessed {folder} into {dataset} (--format {FORMS[form]}) in {summary.seconds:.0f} s")
        rejected = sum(summary.rejected.values())
        print(f"iofeed bench: {dataset} written: {summary.found:,} images found, "
              + ", ".join(f"{name} {count:,}" for name, count in summary.written.items())
              + f", {rejected:,} rejected{f' (see {dataset}/rejected.jsonl)' if rejected else ''}; "
              f"{summary.bytes_out / 2**30:.2f} GiB in {summary.seconds:.0f} s "
              f"({summary.images_per_sec:,.0f} images/sec)")
    setattr(inputs, form, dataset)


BYTES_PER_IMAGE = {"dataset": 20_000, "raw": 256 * 256 * 3}  # a 256 px JPEG at quality 90; uint8 RGB pixels


def _estimate(folder: Path, dataset: Path, form: str) -> str:
    """Roughly what preprocessing `folder` into `form` writes, the free disk there, and which feeds need it."""
    from .feeds import CATALOGUE, FEEDS

    images = sum(len(names) for _top, _dirs, names in os.walk(find_class_root(folder)))
    size = images * BYTES_PER_IMAGE[form]
    free = shutil.disk_usage(next(p for p in Path(dataset).resolve().parents if p.exists())).free
    feeds = ", ".join(n for n in CATALOGUE if FEEDS.caps(n).reads == form)
    room = "" if free > size else ": LESS than that, free some space or leave those feeds out"
    return (f"{images:,} files, about {size / 2**30:,.1f} GiB ({free / 2**30:,.1f} GiB free there{room}); "
            f"for the feeds {feeds} (--feeds without them skips this)")


def data_files(inputs: Inputs) -> list[Path]:
    """Every file a feed may read: the folder's images and the dataset's shards."""
    files: list[Path] = []
    if inputs.folder is not None:
        for top, _dirs, names in os.walk(find_class_root(inputs.folder)):
            files.extend(Path(top, n) for n in names)
    for dataset in (inputs.dataset, inputs.raw):
        if dataset is not None:
            files.extend(p for p in Path(dataset).iterdir() if p.is_file())
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
    for path in progress_bar(files, unit="file", desc="warming page cache", disable=not progress, mininterval=0.5):
        try:
            with open(path, "rb", buffering=0) as f:
                while chunk := f.read(1 << 20):
                    total += len(chunk)
        except OSError:
            continue  # unreadable files are the feeds' business
    return CacheState("warm", len(files), total, time.perf_counter() - start)
