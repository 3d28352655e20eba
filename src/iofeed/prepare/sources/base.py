"""`SourceScan`: what every source kind hands the preprocess pipeline — where each image's bytes
are, its target, and every input left out with the reason."""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..file import WHOLE, Span
from ..scan import Rejection
from .targets import Targets


@dataclass(frozen=True)
class SourceOptions:
    """What a source may be told besides its location (the preprocess options about input)."""

    labels: Path | None = None  # a labels file (CSV or JSON lines) mapping paths under SRC to targets
    label_column: str | None = None  # the column / JSON key / Parquet column holding the label
    image_column: str | None = None  # Parquet / Arrow: the column holding the image
    image_key: tuple[str, ...] | None = None  # WebDataset: the image member's extension(s), first present wins
    spool: Path | None = None  # a private folder for bytes the source must copy out (cells, downloads)


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

    def add(self, path: str, name: str, target: Any, extra: Any = None, span: Span = WHOLE) -> None:
        """Accept one sample."""
        self.paths.append(path)
        self.spans.append(span)
        self.names.append(name)
        self.targets.add(target, extra)

    def __len__(self) -> int:
        return len(self.paths)
