"""Synthetic test images: photo-like pictures, encoded bytes with quirks, and class-folder trees."""
from __future__ import annotations

import io
from pathlib import Path

import numpy as np
from PIL import Image


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
    """`img` encoded as JPEG (quality 92 unless given; other PIL save options pass through)."""
    out = io.BytesIO()
    img.save(out, "JPEG", quality=options.pop("quality", 92), **options)
    return out.getvalue()


def png_bytes(img: Image.Image) -> bytes:
    """`img` encoded as PNG."""
    out = io.BytesIO()
    img.save(out, "PNG")
    return out.getvalue()


def exif_rotated_jpeg(img: Image.Image, orientation: int) -> bytes:
    """A JPEG of `img` whose EXIF Orientation tag is `orientation`."""
    exif = Image.Exif()
    exif[0x0112] = orientation
    return jpeg_bytes(img, exif=exif.tobytes())


def sixteen_bit_png(width: int, height: int) -> bytes:
    """A 16-bit greyscale PNG ramp (mode I;16)."""
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


def make_same_picture_tree(root: Path, copies: int = 8, size: tuple[int, int] = (320, 256)) -> Path:
    """One class folder of `copies` identical PNGs: whatever a batch holds, its pixels differ only
    by the random crop, flip and transform drawn for it."""
    (root / "a").mkdir(parents=True)
    data = png_bytes(smooth_rgb(*size, seed=3))
    for i in range(copies):
        (root / "a" / f"{i}.png").write_bytes(data)
    return root


def interior(mask: np.ndarray) -> np.ndarray:
    """`mask` less its edge pixels (where resizing blends an object with its surround)."""
    inner = mask.copy()
    inner[1:] &= mask[:-1]
    inner[:-1] &= mask[1:]
    inner[:, 1:] &= mask[:, :-1]
    inner[:, :-1] &= mask[:, 1:]
    return inner
