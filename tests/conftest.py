"""Shared fixtures (small image trees with every quirk preprocess must handle) and the skip of a
test whose dependency marker names something missing here."""
from __future__ import annotations

import contextlib
import os
import signal
from pathlib import Path

import pytest

from helpers.images import (
    exif_rotated_jpeg,
    jpeg_bytes,
    make_colour_tree,
    make_image_tree,
    png_bytes,
    sixteen_bit_png,
    smooth_rgb,
)
from helpers.requirements import MODULES, missing

# TensorFlow 2.21 loaded before Triton (which torch._dynamo, and so torchvision.models, imports)
# makes the interpreter segfault; tests import both in one process, so Triton goes first.
with contextlib.suppress(ImportError):
    import triton  # noqa: F401

# The Ctrl-C tests send SIGINT as a terminal would. A shell that starts a job in the background
# (`cmd &` in a script, nohup) starts it with SIGINT ignored, which Python and every child keep:
# those tests then failed for the launcher's reason, not iofeed's. Restore what a terminal gives.
if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)


def pytest_runtest_setup(item: pytest.Item) -> None:
    """Skip a test whose dependency marker (torch, tf, dali, gpu, ...) names what is missing here."""
    for marker in (*MODULES, "gpu"):
        if item.get_closest_marker(marker) and (reason := missing(marker)):
            pytest.skip(reason)


@pytest.fixture
def image_tree(tmp_path: Path) -> tuple[Path, dict[str, int]]:
    """A small clean tree: 3 classes x 6 JPEGs."""
    root = tmp_path / "tree"
    return root, make_image_tree(root)


@pytest.fixture
def quirky_tree(tmp_path: Path) -> tuple[Path, dict[str, int], dict[str, str]]:
    """A Caltech-256-like tree with every quirk. Returns (src, valid {rel: label}, rejected {rel: reason kind})."""
    src = tmp_path / "quirky"
    root = src / "256_ObjectCategories"
    valid = make_image_tree(root, classes=3, per_class=4)
    a, b, c = "001.class0", "002.class1", "003.class2"
    extras = {
        f"{a}/gray.jpg": jpeg_bytes(smooth_rgb(150, 120, 1).convert("L")),
        f"{a}/cmyk.jpg": jpeg_bytes(smooth_rgb(140, 130, 2).convert("CMYK")),
        f"{a}/palette.png": png_bytes(smooth_rgb(100, 90, 3).convert("P")),
        f"{b}/alpha.png": png_bytes(smooth_rgb(110, 100, 4).convert("RGBA")),
        f"{b}/deep.png": sixteen_bit_png(96, 80),
        f"{b}/rotated.jpg": exif_rotated_jpeg(smooth_rgb(300, 200, 5), orientation=6),
        f"{b}/progressive.jpg": jpeg_bytes(smooth_rgb(160, 120, 6), progressive=True),
        f"{c}/big.jpg": jpeg_bytes(smooth_rgb(1400, 1100, 7)),
        f"{c}/named like text.txt": jpeg_bytes(smooth_rgb(90, 90, 8)),
        f"{c}/odd.name.v2 ü.JPG": jpeg_bytes(smooth_rgb(91, 92, 9)),
        f"{c}/greg/nested.jpg": jpeg_bytes(smooth_rgb(100, 100, 10)),
    }
    for rel, data in extras.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_bytes(data)
        valid[rel] = int(rel[:3]) - 1
    good = jpeg_bytes(smooth_rgb(200, 150, 11))
    bad = {
        f"{a}/truncated.jpg": (good[: len(good) // 2], "corrupt or truncated image"),
        f"{a}/empty.jpg": (b"", "empty file"),
        f"{b}/RENAME2": (b"this is not an image\n", "not an image"),
        f"{b}/.DS_Store": (b"\x00\x00\x00\x01Bud1", "hidden file or folder"),
        f"{c}/garbage.jpg": (b"\xff\xd8\xff\xe0" + os.urandom(300), "corrupt or truncated image"),
        "stray_in_root.jpg": (good, "not in a class folder"),
    }
    for rel, (data, _) in bad.items():
        (root / rel).write_bytes(data)
    os.symlink(root / f"{a}/001_0000.jpg", root / f"{c}/link.jpg")
    valid[f"{c}/link.jpg"] = 2
    os.symlink(root / "missing.jpg", root / f"{c}/broken.jpg")
    os.symlink(root / a, root / f"{c}/looped")
    rejected = {rel: reason for rel, (_, reason) in bad.items()}
    rejected[f"{c}/broken.jpg"] = "broken symlink"
    rejected[f"{c}/looped"] = "symlinked folder"
    return src, valid, rejected


@pytest.fixture(scope="session")
def colour_tree(tmp_path_factory) -> Path:
    """4 colour-coded classes x 10 images (40 samples), shared by the loader tests."""
    return make_colour_tree(tmp_path_factory.mktemp("colour") / "tree")


@pytest.fixture(scope="session")
def colour_dataset(colour_tree: Path, tmp_path_factory) -> Path:
    """`colour_tree` preprocessed (val: 2 per class) into small shards."""
    from iofeed.prepare.run import preprocess

    out = tmp_path_factory.mktemp("colour-ds") / "colour.iof"
    preprocess(colour_tree, out, val_per_class=2, shard_bytes=1 << 16, progress=False, workers=1)
    return out


@pytest.fixture(scope="session")
def small_dataset(tmp_path_factory) -> Path:
    """A second dataset of `colour_tree`'s 4 classes, for mixing with it: 8 train, 4 val samples."""
    from iofeed.prepare.run import preprocess

    root = tmp_path_factory.mktemp("mix-small")
    out = root / "small.iof"
    preprocess(make_colour_tree(root / "tree", per_class=3), out, val_per_class=1, shard_bytes=1 << 16,
               progress=False, workers=1)
    return out
