"""Scan a class-per-subfolder image tree (Caltech-256 layout included) by magic bytes."""
from __future__ import annotations

import os
import re
import unicodedata
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from ..errors import IofeedError, SourceError
from ..format.manifest import MANIFEST_NAME
from ..image.sniff import sniff_file

CALTECH_SUBFOLDER = "256_ObjectCategories"
_NUMBERED_CLASS = re.compile(r"^\d+\.(.+)$")


@dataclass(frozen=True)
class Rejection:
    """An input left out, with the reason."""

    path: str  # relative to the scanned root
    reason: str


@dataclass
class FolderScan:
    """What a scan found: accepted image files with labels, and every rejected entry."""

    root: Path
    class_dirs: list[str]
    files: list[str] = field(default_factory=list)  # relative to root, sorted
    labels: list[int] = field(default_factory=list)
    rejected: list[Rejection] = field(default_factory=list)

    @property
    def class_names(self) -> list[str]:
        """Display names: `001.ak47` → `ak47`."""
        return [class_name(d) for d in self.class_dirs]

    @property
    def empty_classes(self) -> list[str]:
        """Class folders without an accepted image: labels with no sample."""
        used = set(self.labels)
        return [d for label, d in enumerate(self.class_dirs) if label not in used]


def class_name(folder: str) -> str:
    """The class name of a folder: Caltech's numbered `001.ak47` gives `ak47`."""
    match = _NUMBERED_CLASS.match(folder)
    return match.group(1) if match else folder


def reason_kind(reason: str) -> str:
    """The reason without its detail in parentheses, for counting."""
    return reason.split(" (")[0]


def none_accepted(what: str, rejected: list[Rejection]) -> SourceError:
    """The error for a source every input of which was rejected: how many for each reason, and the
    commonest reason with one input it was given for (a wrong option, such as a --label-column no
    sample has, then shows on the one line)."""
    if not rejected:
        return SourceError(what)
    counts = Counter(reason_kind(r.reason) for r in rejected).most_common()
    example = next(r for r in rejected if reason_kind(r.reason) == counts[0][0])
    return SourceError(f"{what} ({len(rejected)} files rejected: {', '.join(f'{k} {n}' for k, n in counts)}; e.g. "
                       f"{display_path(example.path)}: {example.reason})")


def display_path(path: str) -> str:
    """A path printable as UTF-8 even when the file name is not valid UTF-8."""
    return os.fsencode(path).decode("utf-8", "backslashreplace")


def find_class_root(src: Path | str) -> Path:
    """The folder that holds the class folders (`src/256_ObjectCategories` when present)."""
    src = Path(src)
    if not src.exists():
        raise SourceError(f"source folder not found: {src} (pass a folder with one subfolder per class)")
    if not src.is_dir():
        raise SourceError(f"source is not a folder: {src} (pass a folder with one subfolder per class)")
    nested = src / CALTECH_SUBFOLDER
    return nested if nested.is_dir() else src


def scan_folder(src: Path | str, sniff: bool = True) -> FolderScan:
    """Scan `src` into accepted images (recognised by their bytes) and rejections with reasons.

    Labels follow the sorted class folder names. Files in nested folders belong to their
    top-level class. Raises SourceError when no class folder or no image is found. Without
    `sniff`, every regular file of the class folders is accepted unread (empty or not an image
    alike): the files `preprocess` would open, as `iofeed doctor` samples them.
    """
    root = find_class_root(src)
    scan = FolderScan(root=root, class_dirs=[], rejected=_beside_caltech(Path(src), root))
    entries = sorted(os.scandir(root), key=lambda e: e.name)
    real_root, seen = os.path.realpath(root), {}
    for entry in entries:
        if entry.name.startswith("."):
            scan.rejected.append(Rejection(entry.name, "hidden file or folder"))
        elif entry.is_dir() and os.path.isfile(os.path.join(entry.path, MANIFEST_NAME)):
            scan.rejected.append(Rejection(entry.name, "an iofeed dataset, not a class folder"))
        elif entry.is_dir(follow_symlinks=False):
            scan.class_dirs.append(entry.name)
            seen[os.path.realpath(entry.path)] = entry.name
        elif entry.is_symlink() and entry.is_dir():
            reason = _linked_class_reason(entry, real_root, seen)
            if reason:
                scan.rejected.append(Rejection(entry.name, reason))
            else:
                scan.class_dirs.append(entry.name)
        elif entry.is_symlink() and not os.path.exists(entry.path):  # a class folder on a disk not mounted?
            target = display_path(os.path.realpath(entry.path))
            scan.rejected.append(Rejection(entry.name, f"broken symlink (to {target}, which is missing)"))
        else:
            scan.rejected.append(Rejection(entry.name, "not in a class folder"))
    _refuse_lookalike_classes(root, scan.class_dirs)
    for label, folder in enumerate(scan.class_dirs):
        _scan_class(root, folder, label, scan, sniff)
    if not scan.class_dirs:
        raise SourceError(f"no class folders in {root} (expected one subfolder per class)")
    if not scan.files:
        raise none_accepted(f"no images found in {root}", scan.rejected)
    return scan


def linked_class_folders(src: Path | str) -> list[tuple[Path, str]]:
    """(where it points, how to show it) of each symlinked folder at the top of a class-folder
    tree `src` (none when `src` is not a local folder): the scan reads them as classes."""
    try:
        root = find_class_root(Path(src))
        entries = list(os.scandir(root))
    except (IofeedError, OSError):
        return []
    return [(Path(e.path).resolve(), f"{display_path(e.path)} (a link to {display_path(os.path.realpath(e.path))})")
            for e in entries if e.is_symlink() and e.is_dir() and not e.name.startswith(".")]


def _beside_caltech(src: Path, root: Path) -> list[Rejection]:
    """The folders and images beside `256_ObjectCategories` when it is the class root (a class
    folder added next to it): not read, so each is a rejection rather than lost without a word."""
    if root == src:
        return []
    beside = sorted((e for e in os.scandir(src) if e.name != CALTECH_SUBFOLDER and not e.name.startswith(".")),
                    key=lambda e: e.name)
    return [Rejection(f"../{e.name}", f"beside {CALTECH_SUBFOLDER} (not read: only the class folders in it are)")
            for e in beside if e.is_dir() or (e.is_file() and not_image(Path(e.path)) is None)]


def _refuse_lookalike_classes(root: Path, class_dirs: list[str]) -> None:
    """SourceError naming two class folders that would be two classes printed with one name: a
    Caltech number dropped (`001.cat`, `002.cat`), or names that differ only in Unicode
    normalisation (a macOS NFD copy beside an NFC one)."""
    seen: dict[str, str] = {}
    for folder in class_dirs:
        name = class_name(folder)
        other = seen.setdefault(unicodedata.normalize("NFC", os.fsencode(name).decode("utf-8", "replace")), folder)
        if other == folder:
            continue
        if class_name(other) == name and name != folder:
            why = f"would both be the class {ascii(name)} (the number before the dot is dropped, as Caltech's)"
        else:
            why = "differ only in Unicode normalisation (NFC/NFD) and would be two classes with one name"
        raise SourceError(f"class folders {ascii(other)} and {ascii(folder)} in {root} {why}: merge or rename one")


def linked_folders(root: Path) -> list[tuple[str, str]]:
    """(name, where it points) of each symlinked folder at the top of `root` that is followed
    (`_linked_class_reason`): a labels-file source reads them as the class-folder scan does."""
    real_root, found = os.path.realpath(root), []
    seen: dict[str, str] = {}
    for entry in sorted(os.scandir(root), key=lambda e: e.name):
        if not entry.name.startswith(".") and entry.is_symlink() and entry.is_dir():
            if _linked_class_reason(entry, real_root, seen) is None:
                found.append((entry.name, os.path.realpath(entry.path)))
    return found


def _linked_class_reason(entry: os.DirEntry[str], real_root: str, seen: dict[str, str]) -> str | None:
    """Why a symlinked class folder at the top of the tree is not followed, or None to follow it
    (a class folder linked from elsewhere is a class, as ImageNet trees built from links have).
    One pointing into the source, at a folder holding it, or at a folder another class already
    reads would duplicate or mislabel images, or loop."""
    target = os.path.realpath(entry.path)
    common = os.path.commonpath([target, real_root])
    if common in (target, real_root):
        where = "at the source or a folder holding it" if common == target else "inside the source"
        return f"symlinked folder (not followed: it points {where}, {display_path(target)})"
    if target in seen:
        return f"symlinked folder (not followed: the same folder as class {display_path(seen[target])})"
    seen[target] = entry.name
    return None


def _scan_class(root: Path, rel_dir: str, label: int, scan: FolderScan, sniff: bool) -> None:
    """Add the files under `root/rel_dir` (recursively) to `scan` with `label`."""
    try:
        entries = sorted(os.scandir(root / rel_dir), key=lambda e: e.name)
    except OSError as exc:
        scan.rejected.append(Rejection(rel_dir, f"unreadable folder ({exc.strerror})"))
        return
    for entry in entries:
        rel = f"{rel_dir}/{entry.name}"
        reason = _rejection_reason(entry, sniff)
        if reason == "folder":
            _scan_class(root, rel, label, scan, sniff)
        elif reason:
            scan.rejected.append(Rejection(rel, reason))
        else:
            scan.files.append(rel)
            scan.labels.append(label)


def _rejection_reason(entry: os.DirEntry[str], sniff: bool) -> str | None:
    """Why `entry` is not an image sample ("folder" to descend into it), or None if it is one
    (without `sniff`: a regular file, whatever its bytes)."""
    if entry.name.startswith("."):
        return "hidden file or folder"
    try:
        if entry.is_symlink():
            if not os.path.exists(entry.path):
                return "broken symlink"
            if entry.is_dir():
                return "symlinked folder (not followed)"
        if entry.is_dir():
            return "folder"
        if not entry.is_file():
            return "not a regular file"
    except OSError as exc:
        return f"unreadable ({exc.strerror})"
    return not_image(Path(entry.path)) if sniff else None


def not_image(path: Path) -> str | None:
    """Why the regular file at `path` is not an image (empty, unrecognised bytes, unreadable), or None."""
    try:
        if path.stat().st_size == 0:
            return "empty file"
        if sniff_file(path) is None:
            return "not an image (unrecognised bytes)"
    except OSError as exc:
        return f"unreadable ({exc.strerror})"
    return None
