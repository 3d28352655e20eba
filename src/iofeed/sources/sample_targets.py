"""The loader's targets beyond one class index: multi-hot vectors and per-sample extras (any
JSON), looked up by sample index in the main process (workers never see them)."""
from __future__ import annotations

import io
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import DatasetError
from ..format.files import read_regular
from ..format.targets import multi_hot, parse_targets
from .remote.urls import is_url
from .samples import SampleSource

TARGETS = ("class", "multi_hot", "boxes", "masks", "text")  # the choices of `Output.target`


@dataclass
class SampleTargets:
    """Each sample's classes (CSR: `offsets`, `indices`) and extra, for the split the loader reads."""

    classes: int
    offsets: np.ndarray
    indices: np.ndarray
    extras: list[Any]

    def multi_hot(self, samples: np.ndarray) -> np.ndarray:
        """float32 (len(samples), classes): 1 where a sample has the class."""
        out = np.zeros((len(samples), self.classes), np.float32)
        for row, sample in enumerate(samples):
            out[row, self.indices[self.offsets[sample]:self.offsets[sample + 1]]] = 1.0
        return out

    def extras_of(self, samples: np.ndarray) -> list[Any]:
        """Each sample's extra (None where it has none), in batch order."""
        return [self.extras[int(s)] for s in samples]


def open_targets(source: str | Path, split: str, data: SampleSource) -> SampleTargets:
    """The targets of `data` (opened from `source`): the split's targets file named by the manifest
    it was opened with, else one class per sample from its labels (a folder, or a dataset of one
    class each)."""
    name = data.targets.get("files", {}).get(split)
    if name is None:
        classes = [[int(label)] if label >= 0 else [] for label in data.label]
        extras: list[Any] = [None] * len(data)
        where = f"{str(source).rstrip('/')}/{split}-samples.npy (its labels)"
    else:
        where = f"{str(source).rstrip('/')}/{name}"
        classes, extras = parse_targets(_read_text(where), where, len(data))
    offsets, indices = multi_hot(classes, len(data.classes), where)
    return SampleTargets(len(data.classes), offsets, indices, extras)


def _read_text(where: str) -> str:
    """The text of a dataset's file at `where` (a path or URL); DatasetError naming it."""
    try:
        if not is_url(where):
            return read_regular(where).decode("utf-8")  # a FIFO named like it would block for ever
        from .remote.urls import filesystem

        return io.TextIOWrapper(io.BytesIO(filesystem(where).cat_file(where)), "utf-8").read()
    except DatasetError:
        raise
    except Exception as exc:  # noqa: BLE001 - storage errors of any library, named by path or URL
        raise DatasetError(f"cannot read {where}: {type(exc).__name__}: {exc}") from None
