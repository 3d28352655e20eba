"""Targets beyond one class index: the kinds a dataset's `targets` manifest entry names, and the
per-split side file (`<split>-targets.jsonl`) of each row's classes and extra."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import DatasetError
from .captions import check_captions_entry

# (multi-label?, has classes?) -> kind. "class": one index per sample (`cls` member, table label);
# "multi_label": a list of indices (`classes.json` member); "none": no classes, only extras (`json`).
TARGET_KINDS = {(False, True): "class", (True, True): "multi_label", (False, False): "none", (True, False): "none"}
TEXT_KIND = "text"  # no classes, a caption per sample (`captions`: `format/captions.py`), extras as for "none"
DEFAULT_TARGETS = {"kind": "class", "extras": False, "files": {}}  # every dataset before format version 4


def check_targets(entry: Any) -> None:
    """ValueError naming the field when a manifest's `targets` entry is not one iofeed writes (a
    kind it does not know would otherwise be read as "not a class" and ignored)."""
    kinds = sorted({*TARGET_KINDS.values(), TEXT_KIND})
    if not isinstance(entry, dict):
        raise ValueError(f'"targets" must be an object, got {json.dumps(entry)[:40]}')
    if entry.get("kind") not in kinds:
        raise ValueError(f'"targets.kind" must be one of {", ".join(kinds)}, got {json.dumps(entry.get("kind"))[:40]}')
    if not isinstance(entry.get("extras"), bool):
        raise ValueError(f'"targets.extras" must be true or false, got {json.dumps(entry.get("extras"))[:40]}')
    files = entry.get("files")
    if not isinstance(files, dict) or not all(isinstance(v, str) for v in files.values()):
        raise ValueError(f'"targets.files" must map splits to file names, got {json.dumps(files)[:40]}')
    if entry["kind"] == TEXT_KIND or "captions" in entry:
        check_captions_entry(entry.get("captions"))


def save_targets(directory: Path, split: str, rows: list[list[Any]]) -> str:
    """Write one `[classes, extra]` JSON line per table row; return the file name."""
    name = f"{split}-targets.jsonl"
    text = "".join(json.dumps(row, separators=(",", ":")) + "\n" for row in rows)
    (Path(directory) / name).write_text(text, encoding="utf-8")
    return name


def parse_targets(text: str, where: str, rows: int) -> tuple[list[list[int]], list[Any]]:
    """Each row's class indices and extra from a targets file's text; DatasetError when malformed."""
    classes, extras = [], []
    try:
        for number, line in enumerate(text.splitlines(), start=1):
            found, extra = json.loads(line)
            if not all(isinstance(c, int) and not isinstance(c, bool) for c in found):  # int(1.5) would be 1
                raise ValueError(f"line {number}: class indices must be integers, got {json.dumps(found)[:40]}")
            classes.append(list(found))
            extras.append(extra)
    except (ValueError, TypeError) as exc:
        raise DatasetError(f"malformed targets file {where}: {exc} (run `iofeed preprocess` again)") from None
    if len(classes) != rows:
        raise DatasetError(f"{where} has {len(classes)} rows, the sample table {rows} (run `iofeed preprocess` again)")
    return classes, extras


def multi_hot(classes: list[list[int]], count: int, where: str = "the targets file") -> tuple[np.ndarray, np.ndarray]:
    """Class lists as CSR arrays (offsets, indices), the form workers and batches slice; DatasetError
    naming `where` (the targets file) and the first row holding an index outside 0..count-1."""
    offsets = np.zeros(len(classes) + 1, dtype=np.int64)
    offsets[1:] = np.cumsum([len(c) for c in classes])
    indices = np.fromiter((i for c in classes for i in c), dtype=np.int64, count=int(offsets[-1]))
    if len(indices) and (indices.min() < 0 or indices.max() >= count):
        at = int(np.flatnonzero((indices < 0) | (indices >= count))[0])
        row = int(np.searchsorted(offsets, at, side="right")) - 1
        raise DatasetError(f"{where} line {row + 1}: class index {int(indices[at])} is outside 0..{count - 1} (the "
                           f"manifest has {count} classes): run `iofeed preprocess` again")
    return offsets, indices
