"""The `labels` source: image files under SRC and a labels file (`--labels FILE`) mapping their
paths (relative to SRC) to a class, several classes or any JSON value.

The file's kind is read from its content: JSON lines (`{"path": ..., "label": ...}`, other keys
become the sample's extra), CSV with a header (`path,label,...`: the `path` column or the first,
the `--label-column` or `label` column or the second, other columns the extra), or plain lines
`PATH LABEL [LABEL ...]` split on whitespace (ImageNet's validation lists). A path listed on
several rows with different labels (the same row repeated is one label), a JSON list in a cell,
or several labels on a plain line make a multi-label sample; a path without its extension
matches the one image with that stem (`ILSVRC2012_val_00000001` → `ILSVRC2012_val_00000001.JPEG`,
as in `LOC_val_solution.csv`).
Listed paths and file names are compared normalised (`normal_path`: NFC, `\\` as `/`, `./` and
`..` resolved). A CSV whose first row names a file under SRC has no header (path, label, then
the other columns as `column3`, ...).
"""
from __future__ import annotations

import csv
import io
import json
import os
import posixpath
import unicodedata
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ...errors import OptionError, SourceError
from ...sources.folder_scan import Rejection, display_path, linked_folders, not_image
from .base import SourceOptions, SourceScan
from .label_cells import label_cell, missing, parse_cell
from .label_targets import Targets

PATH_KEYS = ("path", "file", "filename", "image", "ImageId")
Row = tuple[str, Any, Any, int]  # (listed path, target, extra, line number)


def scan(src: str, options: SourceOptions) -> SourceScan:
    """The files of `src` the labels file names, with their targets; every other file rejected."""
    if options.labels is None:
        raise OptionError("the labels source needs --labels FILE")
    root = Path(src)
    if not root.is_dir():
        raise SourceError(f"source is not a folder: {src} (with --labels, SRC is the folder the paths start from)")
    files = _Files(_files_under(root, Path(options.labels)))
    rows = read_labels(Path(options.labels), options.label_column, lambda listed: files.find(listed)[0] is not None)
    merged: dict[str, tuple[list[Any], Any, int]] = {}
    result = SourceScan(root=str(root), kind="labels", targets=Targets(json_targets=True))
    for listed, target, extra, line in rows:
        rel, fits = files.find(listed)
        if rel is None:
            result.rejected.append(Rejection(listed, files.why_not(listed, fits, options.labels, src)))
            continue
        merged.setdefault(rel, ([], extra, line))[0].append(target)
    for rel in sorted(files.all - set(merged)):
        result.rejected.append(Rejection(rel, f"not in the labels file {Path(options.labels).name}"))
    for rel, (targets, extra, line) in sorted(merged.items()):
        blank = [t for t in targets if missing(t)]
        targets = [t for t in targets if not missing(t)]
        reason = not_image(root / rel) if targets else f"no label ({_said(blank[0])} in {Path(options.labels).name})"
        if reason:
            result.rejected.append(Rejection(rel, reason))
            continue
        result.add(str(root / rel), rel, _combine(targets), extra, where=f"{Path(options.labels).name} line {line}")
    if not len(result):
        raise SourceError(_none_match(src, Path(options.labels), rows, sorted(files.all)))
    return result


def _said(value: Any) -> str:
    """A missing label as a reason names it: empty, null, or the text written (`'NaN'`)."""
    if isinstance(value, str) and value.strip():
        return repr(value.strip())
    return "null" if value is None else "empty" if isinstance(value, str) else repr(value)


class _Files:
    """The files under SRC by normalised path and by stem, for finding the one a row lists."""

    def __init__(self, rels: set[str]) -> None:
        self.all = rels
        self.by_key: dict[str, list[str]] = {}
        for rel in sorted(rels):
            self.by_key.setdefault(normal_path(rel), []).append(rel)
        self.by_stem: dict[str, list[str]] = {}
        for key, found in self.by_key.items():
            self.by_stem.setdefault(os.path.splitext(key)[0], []).extend(found)

    def find(self, listed: str) -> tuple[str | None, list[str]]:
        """(the file `listed` names, []), or (None, the files it fits: none, or several). A name
        written as it is on disk is that file, even beside one differing in Unicode form."""
        if listed in self.all:
            return listed, []
        key = normal_path(listed)
        found = self.by_key.get(key) or self.by_stem.get(key, [])
        return (found[0], []) if len(found) == 1 else (None, sorted(found))

    def why_not(self, listed: str, fits: list[str], labels: Path, src: str) -> str:
        """The rejection reason of a row whose path names no one file."""
        if not fits and os.path.lexists(Path(src) / listed):
            return f"listed in {labels}, but {_unread(Path(src), listed)}"
        if not fits:
            return f"listed in {labels} but not found under {src}"
        if normal_path(listed) in self.by_key:  # two names that differ only in Unicode form (NFC / NFD)
            return f"listed in {labels}, which fits {', '.join(fits)} alike: rename one of them"
        return f"listed in {labels} without an extension, which fits {', '.join(fits)}: list the file's full name"


def _unread(src: Path, listed: str) -> str:
    """Why a file that is there under `src` is not read (hidden, under a link that is not followed)."""
    parts = Path(listed).parts
    if any(part.startswith(".") and part not in (".", "..") for part in parts):
        return "hidden (a name starting with '.': rename it)"
    if any((src / Path(*parts[:i])).is_symlink() for i in range(1, len(parts))):
        return "under a symlinked folder that is not followed (one below the top of SRC, or pointing into it)"
    return "not a regular file"


def normal_path(path: str) -> str:
    """A relative path as compared: NFC, `\\` as `/`, `./` and `..` resolved (`a/../b` is `b`)."""
    return posixpath.normpath(unicodedata.normalize("NFC", path.strip()).replace("\\", "/"))


def _none_match(src: str, labels: Path, rows: list[Row], files: list[str]) -> str:
    """The error when no listed path names an image: one listed path and one file, side by side."""
    if not rows:
        return f"{labels} lists no image (an empty labels file?)"
    if not files:
        return f"no files under {src} to match {labels} against"
    listed, _, _, line = rows[0]
    return (f"no path listed in {labels} names a file under {src}: e.g. line {line} lists {listed!r}, and the "
            f"files are like {files[0]!r} (paths are relative to SRC)")


def read_labels(path: Path, label_column: str | None, listed: Callable[[str], bool] = lambda _: False) -> list[Row]:
    """(path, target, extra, line) per row of a labels file; SourceError naming the line when
    malformed. `listed(cell)`: whether a cell names a file under SRC (a CSV row that does is data,
    not a header)."""
    try:
        text = path.read_text(encoding="utf-8-sig")
    except (OSError, ValueError) as exc:
        raise SourceError(f"cannot read labels file {path}: {exc} (pass a UTF-8 text file: CSV, JSON lines or "
                          "`PATH LABEL` lines)") from None
    first = next((line for line in text.splitlines() if line.strip()), "")
    if first.lstrip().startswith("{"):
        return _jsonl(path, text, label_column)
    if "," in first or "\t" in first:
        return _csv(path, text, "," if "," in first else "\t", label_column, listed)
    if label_column is not None:
        raise OptionError(f"--label-column {label_column}: {path} has no header (plain `PATH LABEL` lines)")
    rows = []
    for number, line in enumerate(text.splitlines(), start=1):
        fields = line.split()
        if not fields:
            continue
        if len(fields) < 2:
            raise SourceError(f"{path} line {number}: need `PATH LABEL`, got {line!r}")
        labels = [label_cell(f) for f in fields[1:]]
        rows.append((fields[0], labels[0] if len(labels) == 1 else labels, None, number))
    return rows


def _jsonl(path: Path, text: str, label_column: str | None) -> list[Row]:
    rows = []
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
            key = next(k for k in PATH_KEYS if k in record)
            label = label_column or "label"
            target = record[label]
        except (ValueError, StopIteration, KeyError, TypeError):
            raise SourceError(f"{path} line {number}: need a JSON object with a path ({', '.join(PATH_KEYS)}) "
                              f"and {label_column or 'label'!r}, got {line[:80]!r}") from None
        rest = {k: v for k, v in record.items() if k not in (key, label)}
        rows.append((str(record[key]), target, rest or None, number))
    return rows


def _csv(path: Path, text: str, delimiter: str, label_column: str | None, listed: Callable[[str], bool]) -> list[Row]:
    lines = list(enumerate(csv.reader(io.StringIO(text), delimiter=delimiter), start=1))
    lines = [(number, fields) for number, fields in lines if any(f.strip() for f in fields)]
    first = [h.strip() for h in lines[0][1]]
    if any(listed(cell) for cell in first) and not set(first) & {*PATH_KEYS, label_column or "label"}:
        if label_column is not None:
            raise OptionError(f"--label-column {label_column}: {path} has no header (its first row lists a file)")
        header = ["path", "label", *(f"column{i + 1}" for i in range(2, len(first)))]
    else:
        header, lines = first, lines[1:]
    path_at = next((header.index(k) for k in PATH_KEYS if k in header), 0)
    if label_column is not None and label_column not in header:
        raise OptionError(f"--label-column {label_column!r} is not a column of {path} ({', '.join(header)})")
    label_at = header.index(label_column or "label") if (label_column or "label") in header else 1
    if len(header) < 2 or label_at == path_at:
        raise SourceError(f"{path}: need a header with a path and a label column, got {', '.join(header)}")
    rows = []
    for number, fields in lines:
        if len(fields) != len(header):
            raise SourceError(f"{path} line {number}: {len(fields)} fields, the header has {len(header)}")
        rest = {h: parse_cell(f) for i, (h, f) in enumerate(zip(header, fields)) if i not in (path_at, label_at)}
        rows.append((fields[path_at].strip(), label_cell(fields[label_at]), rest or None, number))
    return rows


def _combine(targets: list[Any]) -> Any:
    """One target from a path's rows: the one (a row repeated as it was is still one label, not
    a multi-label sample), or the classes of every row (multi-label)."""
    if all(target == targets[0] for target in targets):
        return targets[0]
    merged = []
    for target in targets:
        merged += target if isinstance(target, list) else [target]
    return merged


def _files_under(root: Path, labels: Path) -> set[str]:
    """Every regular file under `root` (relative, '/'-separated), hidden ones and `labels` aside.
    A symlinked folder at the top of `root` is followed as a class folder is (`scan.linked_folders`)."""
    found = set()
    skip = labels.resolve()
    tops = [(root, root)] + [(root / name, Path(target)) for name, target in linked_folders(root)]
    for top, real in tops:
        for folder, dirs, names in os.walk(real):
            dirs[:] = [d for d in dirs if not d.startswith(".")]
            for name in names:
                full = Path(folder) / name
                if not name.startswith(".") and full.resolve() != skip:
                    found.add(display_path((top / full.relative_to(real)).relative_to(root).as_posix()))
    return found
