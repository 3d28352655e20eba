"""Shared fixtures: small image trees with every quirk preprocess must handle."""
from __future__ import annotations

import contextlib
import io
import os
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

# TensorFlow 2.21 loaded before Triton (which torch._dynamo, and so torchvision.models, imports)
# makes the interpreter segfault; tests import both in one process, so Triton goes first.
with contextlib.suppress(ImportError):
    import triton  # noqa: F401


def smooth_rgb(width: int, height: int, seed: int) -> Image.Image:
    """A photo-like image: smooth random colour field plus a few edges (decodes like a photo)."""
    rng = np.random.default_rng(seed)
    coarse = rng.integers(0, 256, size=(4, 4, 3), dtype=np.uint8)
    img = Image.fromarray(coarse).resize((width, height), Image.Resampling.BICUBIC)
    pixels = np.asarray(img).astype(np.int16)
    pixels[: height // 3, : width // 2] += 40
    noise = rng.integers(-6, 7, size=pixels.shape, dtype=np.int16)
    return Image.fromarray(np.clip(pixels + noise, 0, 255).astype(np.uint8))


def jpeg_bytes(img: Image.Image, **options) -> bytes:
    out = io.BytesIO()
    img.save(out, "JPEG", quality=options.pop("quality", 92), **options)
    return out.getvalue()


def png_bytes(img: Image.Image) -> bytes:
    out = io.BytesIO()
    img.save(out, "PNG")
    return out.getvalue()


def exif_rotated_jpeg(img: Image.Image, orientation: int) -> bytes:
    exif = Image.Exif()
    exif[0x0112] = orientation
    return jpeg_bytes(img, exif=exif.tobytes())


def sixteen_bit_png(width: int, height: int) -> bytes:
    ramp = np.linspace(0, 65535, width * height).reshape(height, width).astype(np.uint16)
    return png_bytes(Image.fromarray(ramp))


def make_image_tree(root: Path, classes: int = 3, per_class: int = 6, seed: int = 0) -> dict[str, int]:
    """Plain JPEG class folders `NNN.name/`; returns {relative path: label}."""
    expected = {}
    for c in range(classes):
        folder = root / f"{c + 1:03d}.class{c}"
        folder.mkdir(parents=True, exist_ok=True)
        for i in range(per_class):
            rel = f"{folder.name}/{c + 1:03d}_{i:04d}.jpg"
            size = (120 + 37 * i, 90 + 23 * c)
            (root / rel).write_bytes(jpeg_bytes(smooth_rgb(*size, seed=seed * 1000 + c * 100 + i)))
            expected[rel] = c
    return expected


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


CLASS_COLOURS = [(220, 40, 40), (40, 200, 60), (50, 60, 230), (230, 220, 50)]


def make_colour_tree(root: Path, per_class: int = 10, corrupt: int = 0) -> Path:
    """Class c images are near-flat CLASS_COLOURS[c] with texture, so labels can be checked from
    pixels after any crop. `corrupt` truncated JPEGs go into the first class."""
    for c, colour in enumerate(CLASS_COLOURS):
        folder = root / f"{c + 1:03d}.colour{c}"
        folder.mkdir(parents=True, exist_ok=True)
        rng = np.random.default_rng(c)
        for i in range(per_class):
            w, h = 160 + 13 * i, 140 + 7 * (i % 5)
            pixels = np.clip(np.array(colour) + rng.integers(-12, 13, (h, w, 3)), 0, 255).astype(np.uint8)
            (folder / f"{i:04d}.jpg").write_bytes(jpeg_bytes(Image.fromarray(pixels)))
    good = (root / "001.colour0" / "0000.jpg").read_bytes()
    for i in range(corrupt):
        (root / "001.colour0" / f"bad{i}.jpg").write_bytes(good[: len(good) // 3])
    return root


def label_from_pixels(image: np.ndarray) -> int:
    """The class whose colour is nearest the image's mean colour."""
    mean = image.reshape(-1, 3).mean(axis=0)
    return int(np.argmin([np.abs(mean - np.array(c)).sum() for c in CLASS_COLOURS]))


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


def state_after(ld, batches: int) -> dict:
    """Take `batches` batches of the loader's current epoch, then its state (mid-epoch)."""
    for k, _ in enumerate(ld, start=1):
        if k == batches:
            return ld.state_dict()
    raise AssertionError(f"the epoch has fewer than {batches} batches")


def shm_entries() -> set[str]:
    """Names in /dev/shm (shared memory segments and named semaphores)."""
    return set(os.listdir("/dev/shm")) if os.path.isdir("/dev/shm") else set()
