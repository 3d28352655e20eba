"""The `segmentation` source: semantic segmentation as image + PNG label-map pairs, recognised by
content (a folder of images beside a folder of single-channel PNGs of the same names): ADE20K
(`images/` + `annotations/`), VOC (`JPEGImages/` + `SegmentationClass/`, palette PNGs: the
palette index is the class), or plain `images/` + `masks/`, with split folders below them
(`images/training/x.jpg` + `annotations/training/x.png`). A mask pixel is its class id as written
(255, "ignore" in VOC and Cityscapes' train ids, is kept as it is). Class names from
`classes.txt` (one a line, index = line), else none.

Each pair is a sample with no objects and its label map (`box_pack` stores it as the mask);
an image without a mask, a mask that is not a label map (RGB colour-coded) and a mask of another
size than its image are rejected with that reason."""
from __future__ import annotations

from pathlib import Path

from PIL import Image

from ...errors import SourceError
from ...sources.folder_scan import Rejection
from .base import SourceOptions, SourceScan
from .image_pairs import PairedFolder, annotation_of, first_files, image_files, image_size, paired_folders
from .label_targets import Targets

IMAGE_DIRS = ("images", "JPEGImages", "img")
MASK_DIRS = ("masks", "annotations", "SegmentationClass", "labels", "gt")
LABEL_MAP_MODES = ("L", "P")  # 8-bit greyscale or palette: one class id a pixel
NAMES_FILE = "classes.txt"
PROBE_FILES = 8


def segmentation_folders(path: Path) -> list[PairedFolder]:
    """The image/mask folder pairs at `path`, or [] when the first PNGs of its mask folders are not
    label maps named like an image beside them."""
    pairs = paired_folders(path, IMAGE_DIRS, MASK_DIRS)
    for pair in pairs:
        for mask in first_files(pair.annotations, ".png", PROBE_FILES):
            rel = mask.relative_to(pair.annotations).with_suffix("")
            if _mode(mask) in LABEL_MAP_MODES and any((pair.images / rel.parent).glob(f"{rel.name}.*")):
                return pairs
    return []


def _mode(path: Path) -> str | None:
    try:
        with Image.open(path) as image:
            return str(image.mode) if image.format == "PNG" else None
    except (OSError, ValueError):
        return None


def scan(src: str, options: SourceOptions) -> SourceScan:
    """Every image with its label map (checked by header: an 8-bit PNG of the image's size)."""
    root = Path(src)
    pairs = segmentation_folders(root)
    if not pairs:
        raise SourceError(f"{src}: no segmentation layout found (an image folder such as images/ beside a "
                          "folder of PNG label maps such as masks/ or annotations/, named like the images)")
    names = None
    if (root / NAMES_FILE).is_file():
        names = [line.strip() for line in (root / NAMES_FILE).read_text().splitlines() if line.strip()]
    result = SourceScan(root=str(root), kind="segmentation", targets=Targets(names=names), objects=[])
    for pair in pairs:
        for image in image_files(pair, root, result.rejected):
            rel = image.relative_to(root).as_posix()
            mask = annotation_of(pair, image, ".png")
            reason = _mask_problem(mask, image, root)
            if reason:
                result.rejected.append(Rejection(rel, reason))
                continue
            size = image_size(image)
            assert size is not None, "checked by _mask_problem"
            result.add(str(image), rel, [],
                       objects={"size": list(size), "objects": [], "label_map": str(mask)})
    return result


def _mask_problem(mask: Path, image: Path, root: Path) -> str | None:
    """Why `mask` cannot be `image`'s label map, or None."""
    shown = mask.relative_to(root).as_posix()
    if not mask.is_file():
        return f"no mask ({shown} is missing)"
    size = image_size(image)
    if size is None:
        return "unreadable image header"
    try:
        with Image.open(mask) as opened:
            mode, mask_size, kind = opened.mode, opened.size, opened.format
    except (OSError, ValueError):
        return f"unreadable mask ({shown})"
    if kind != "PNG" or mode not in LABEL_MAP_MODES:
        return (f"mask not a label map ({shown}: {kind} {mode}; save class ids as an 8-bit greyscale or "
                "palette PNG)")
    if tuple(mask_size) != size:
        return f"mask of another size ({shown} is {mask_size[0]}x{mask_size[1]}, the image {size[0]}x{size[1]})"
    return None
