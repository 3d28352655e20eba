"""Bytes → RGB 8-bit Pillow image (EXIF, CMYK, palette, alpha, 16-bit), resizing and JPEG encoding."""
from __future__ import annotations

import io
import threading
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import numpy as np
from PIL import Image, ImageOps, UnidentifiedImageError

from ..errors import SampleError

_EXIF_ORIENTATION = 0x0112
_TRANSPOSING_ORIENTATIONS = (5, 6, 7, 8)
_WHITE = (255, 255, 255)
_WARNINGS = threading.Lock()
MAX_PIXELS = 89_478_485  # Pillow's decompression-bomb warning threshold (~9459 x 9459): refused above it


@dataclass(frozen=True)
class Decoded:
    """A decoded RGB image and what it was before conversion."""

    image: Image.Image
    original_size: tuple[int, int]  # (width, height), EXIF orientation applied
    original_mode: str
    format: str
    progressive: bool
    oriented: bool  # an EXIF orientation other than "normal" was applied


@dataclass(frozen=True)
class Opened:
    """An image whose header is read but whose pixels are not decoded yet."""

    image: Image.Image
    size: tuple[int, int]  # (width, height) after EXIF orientation
    orientation: int

    @property
    def transposed(self) -> bool:
        """Whether EXIF orientation swaps width and height."""
        return self.orientation in _TRANSPOSING_ORIENTATIONS


def check_pixels(width: int, height: int) -> None:
    """SampleError "too many pixels" for an image above `MAX_PIXELS`: the one limit preprocess and
    every loader path apply (a 400-megapixel JPEG would take gigabytes to decode)."""
    if width * height > MAX_PIXELS:
        raise SampleError(f"too many pixels ({width}x{height} = {width * height:,}, the limit is {MAX_PIXELS:,})")


@contextmanager
def _quiet() -> Iterator[None]:
    """Pillow's warnings while it reads a header: the decompression-bomb one raised (the image is
    refused), the others (odd EXIF, ...) not printed. `catch_warnings` swaps process-wide state, so
    one thread at a time (the DALI engine reads headers on its external-source thread); a header read is short."""
    with _WARNINGS, warnings.catch_warnings():
        warnings.simplefilter("ignore")
        warnings.simplefilter("error", Image.DecompressionBombWarning)
        yield


@contextmanager
def decode_errors() -> Iterator[None]:
    """Turn Pillow's many failure types into SampleError with a reason (a decompression-bomb
    warning raised as an error by `_quiet` becomes "too many pixels")."""
    try:
        yield
    except SampleError:
        raise
    except (Image.DecompressionBombError, Image.DecompressionBombWarning) as exc:
        raise SampleError(f"too many pixels ({exc})") from None
    except UnidentifiedImageError:
        raise SampleError("corrupt or truncated image (Pillow cannot identify it)") from None
    except (OSError, SyntaxError, ValueError, EOFError, IndexError, KeyError, TypeError) as exc:
        raise SampleError(f"corrupt or truncated image ({exc})") from None


def is_progressive(info: dict[str | tuple[int, int], Any]) -> bool:
    """Whether a Pillow image's `info` marks a progressive JPEG."""
    return bool(info.get("progressive") or info.get("progression"))


def open_image(data: bytes) -> Opened:
    """Read the header of `data` (cheap): size after EXIF orientation. Raises SampleError."""
    with decode_errors(), _quiet():
        img = Image.open(io.BytesIO(data))
        check_pixels(*img.size)
        orientation = img.getexif().get(_EXIF_ORIENTATION, 1) or 1
        size = (img.height, img.width) if orientation in _TRANSPOSING_ORIENTATIONS else img.size
        return Opened(img, size, orientation)


def decode_rgb(opened: Opened, min_size: tuple[int, int] | None = None) -> Decoded:
    """Decode an opened image to RGB 8-bit with EXIF orientation applied.

    With `min_size` (width, height after orientation), JPEGs are decoded at the smallest DCT
    scale (1/2, 1/4, 1/8) that still covers it. Raises SampleError naming the reason.
    """
    img = opened.image
    with decode_errors():
        fmt = img.format or "unknown"
        progressive = is_progressive(img.info)
        mode = img.mode
        if min_size is not None and fmt == "JPEG":
            img.draft(None, (min_size[1], min_size[0]) if opened.transposed else min_size)
        img.load()
        oriented = opened.orientation != 1
        if oriented:
            img = ImageOps.exif_transpose(img)
        rgb = to_rgb(img)
    return Decoded(rgb, opened.size, mode, fmt, progressive, oriented)


def open_rgb(data: bytes, min_size: tuple[int, int] | None = None) -> Decoded:
    """`open_image` then `decode_rgb`: bytes to an RGB image, DCT-scaled to cover `min_size`."""
    return decode_rgb(open_image(data), min_size)


def to_rgb(img: Image.Image) -> Image.Image:
    """Convert any Pillow mode to RGB 8-bit: alpha is composited on white, 16-bit scaled down."""
    if img.mode == "RGB":
        return img
    if img.mode == "P":
        img = img.convert("RGBA" if "transparency" in img.info else "RGB")
    if img.mode in ("RGBA", "LA", "PA", "RGBa", "La"):
        rgba = img.convert("RGBA")
        background = Image.new("RGB", rgba.size, _WHITE)
        background.paste(rgba, mask=rgba.getchannel("A"))
        return background
    if img.mode.startswith("I") or img.mode == "F":
        return _high_depth_to_rgb(img)
    return img.convert("RGB")


def _high_depth_to_rgb(img: Image.Image) -> Image.Image:
    """16-bit, 32-bit integer or float grayscale → 8-bit RGB (65535 maps to 255)."""
    pixels = np.asarray(img).astype(np.float64)
    if img.mode != "F" and pixels.max(initial=0) > 255:
        pixels = pixels / 257.0
    gray = np.clip(np.rint(pixels), 0, 255).astype(np.uint8)
    return Image.fromarray(gray, "L").convert("RGB")


def shorter_side_size(size: tuple[int, int], shorter: int) -> tuple[int, int]:
    """(width, height) with the shorter side set to `shorter`, never upscaling."""
    w, h = size
    if min(w, h) <= shorter:
        return size
    if w <= h:
        return shorter, max(1, round(h * shorter / w))
    return max(1, round(w * shorter / h)), shorter


def resize_shorter(img: Image.Image, shorter: int) -> Image.Image:
    """Resize an RGB image so the shorter side is `shorter`, never upscaling.

    Antialiased bilinear (`resize.crop_resize`: PyTorch's vectorised uint8 kernel when
    installed, ~3x faster than Pillow's): after DCT-scaled decoding the factor left is below 2,
    where bilinear is close to bicubic.
    """
    from .resize import crop_resize

    width, height = shorter_side_size(img.size, shorter)
    if (width, height) == img.size:
        return img
    return Image.fromarray(crop_resize(np.asarray(img), (0, 0, img.width, img.height), False, (height, width)))


def encode_jpeg(img: Image.Image, quality: int) -> bytes:
    """Baseline (not progressive) JPEG bytes that GPU hardware decoders accept."""
    out = io.BytesIO()
    img.save(out, "JPEG", quality=quality, progressive=False, optimize=False)
    return out.getvalue()
