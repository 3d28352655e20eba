"""Images paired with an annotation file by relative path, as YOLO (`images/` + `labels/*.txt`) and
semantic segmentation sets (`images/` + `masks/*.png`) lay them out: `images/train/x.jpg` goes
with `labels/train/x.txt`, `train/images/x.jpg` with `train/labels/x.txt` (the last `images`
folder of the path swapped for the annotation folder, as Ultralytics finds its labels)."""
from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from PIL import Image

from ...image.sniff import sniff_file
from ...sources.folder_scan import Rejection


@dataclass(frozen=True)
class PairedFolder:
    """A folder of images and the folder beside it that holds their annotations."""

    images: Path
    annotations: Path


def paired_folders(root: Path, image_names: tuple[str, ...], annotation_names: tuple[str, ...]
                   ) -> list[PairedFolder]:
    """Image folders named one of `image_names` at the top of `root` or one level down (Roboflow's
    `train/images`), each with its first sibling named one of `annotation_names`."""
    found = []
    for parent in [root, *sorted(p for p in root.iterdir() if p.is_dir() and not p.name.startswith("."))]:
        for name in image_names:
            images = parent / name
            partner = next((parent / a for a in annotation_names if (parent / a).is_dir()), None)
            if images.is_dir() and partner is not None:
                found.append(PairedFolder(images, partner))
    return found


def first_files(folder: Path, suffix: str, limit: int) -> list[Path]:
    """Up to `limit` files ending in `suffix` under `folder` (sorted walk): what a content probe reads."""
    out: list[Path] = []
    for top, dirs, files in os.walk(folder):
        dirs.sort()
        out += [Path(top) / f for f in sorted(files) if f.lower().endswith(suffix) and not f.startswith(".")]
        if len(out) >= limit:
            break
    return out[:limit]


def image_files(pair: PairedFolder, root: Path, rejected: list[Rejection]) -> list[Path]:
    """The images under `pair.images` (recognised by their bytes), sorted; every other file is
    rejected with its reason (path relative to `root`)."""
    out = []
    for top, dirs, files in os.walk(pair.images):
        dirs[:] = sorted(d for d in dirs if not d.startswith("."))
        for name in sorted(files):
            path = Path(top) / name
            if name.startswith("."):
                continue
            if sniff_file(path) is None:
                rejected.append(Rejection(path.relative_to(root).as_posix(), "not an image"))
            else:
                out.append(path)
    return out


def annotation_of(pair: PairedFolder, image: Path, suffix: str) -> Path:
    """Where `image`'s annotation is: the same relative path under `pair.annotations`, its suffix `suffix`."""
    return (pair.annotations / image.relative_to(pair.images)).with_suffix(suffix)


def image_size(path: Path) -> tuple[int, int] | None:
    """(width, height) from the file's header, or None when it cannot be read."""
    try:
        with Image.open(path) as image:
            return int(image.size[0]), int(image.size[1])
    except (OSError, ValueError, Image.DecompressionBombError):
        return None
