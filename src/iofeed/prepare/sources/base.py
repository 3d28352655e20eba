"""`SourceScan`: what every source kind hands the preprocess pipeline — where each image's bytes
are, its target, and every input left out with the reason."""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ...sources.folder_scan import Rejection
from ..file import WHOLE, Span
from .label_targets import Targets


@dataclass(frozen=True)
class SourceOptions:
    """What a source may be told besides its location (the preprocess options about input)."""

    labels: Path | None = None  # a labels file (CSV or JSON lines) mapping paths under SRC to targets
    label_column: str | None = None  # the column / JSON key / Parquet column holding the label
    image_column: str | None = None  # Parquet / Arrow: the column holding the image
    image_key: tuple[str, ...] | None = None  # WebDataset: the image member's extension(s), first present wins
    spool: Path | None = None  # a private folder for bytes the source must copy out (cells, downloads)
    label_names: bool = False  # every label is a class name as written (`true`, `1.5`, `5000000`)
    target: str = "class"  # "text": the caption is the target (`webdataset_captions.py`), no classes
    box_format: str | None = None  # WebDataset boxes: how to read them where the json does not say


@dataclass
class SourceScan:
    """Accepted samples (image bytes at `spans[i]` of `paths[i]`, targets in `targets`) and
    rejections. `names[i]` is the sample's printable name in the source (its file, tar member or
    table row), recorded in the dataset's source list."""

    root: str  # the source as the user named it, for `iofeed inspect`
    kind: str  # the registry name of the source kind
    targets: Targets
    paths: list[str] = field(default_factory=list)
    spans: list[Span] = field(default_factory=list)
    names: list[str] = field(default_factory=list)
    rejected: list[Rejection] = field(default_factory=list)
    class_dirs: list[str] | None = None  # folders of a class-folder tree (else the class names)
    empty_classes: list[str] = field(default_factory=list)
    objects: list[Any] | None = None  # detection sources: per sample {"size": [w, h], "objects": [...]}
    captions: list[str] | None = None  # `--target text`: each sample's caption, as written
    notes: list[str] = field(default_factory=list)  # what the summary says about the source (counted cases)

    def add(self, path: str, name: str, target: Any, extra: Any = None, span: Span = WHOLE,
            where: str | None = None, objects: Any = None) -> None:
        """Accept one sample (`where`: where its label is written, when not in `name`; `objects`:
        its boxes and masks, for a detection source)."""
        self.paths.append(path)
        self.spans.append(span)
        self.names.append(name)
        self.targets.add(target, extra, where)
        if self.objects is not None:
            self.objects.append(objects)

    def settle(self, label_names: bool = False) -> None:
        """Move the samples whose target cannot be stored (`Targets.check`) to the rejections, each
        with its reason; SourceError when the targets together make no class list. `label_names`:
        every label is a class name first (`Targets.as_names`)."""
        if label_names:
            self.targets.as_names()
        bad = self.targets.check(self.names)
        if not bad:
            return
        self.rejected += [Rejection(self.names[i], reason) for i, reason in bad.items()]
        keep = [i for i in range(len(self)) if i not in bad]
        self.paths = [self.paths[i] for i in keep]
        self.spans = [self.spans[i] for i in keep]
        self.names = [self.names[i] for i in keep]
        if self.objects is not None:
            self.objects = [self.objects[i] for i in keep]
        if self.captions is not None:
            self.captions = [self.captions[i] for i in keep]
        self.targets.keep(keep)

    def __len__(self) -> int:
        return len(self.paths)
