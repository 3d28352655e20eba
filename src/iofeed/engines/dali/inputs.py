"""One sample's bytes as DALI takes them: plain JPEGs as they are (their size read from the
markers), other images through iofeed's Pillow path as an uncompressed PPM, so that both engines
see the same pixels."""
from __future__ import annotations

from ...image.pil import Opened, decode_rgb, open_image

_SOF = frozenset({0xC0, 0xC1, 0xC2})  # baseline, extended, progressive Huffman JPEG
SEQUENTIAL = frozenset({0xC0, 0xC1})  # baseline and extended Huffman JPEG, not progressive


def jpeg_header(data: bytes, frames: frozenset[int] = _SOF) -> tuple[int, int] | None:
    """(width, height) of a plain JPEG DALI decodes as Pillow does, from its markers (fast).

    None when it is not one: other formats, EXIF (orientation needs Pillow), CMYK, arithmetic
    coding, a frame type not in `frames` (start-of-frame markers), or anything unexpected.
    """
    if data[:2] != b"\xff\xd8":
        return None
    i, end = 2, len(data)
    while i + 4 <= end:
        if data[i] != 0xFF:
            return None
        marker = data[i + 1]
        if marker == 0xFF:  # fill byte
            i += 1
            continue
        length = (data[i + 2] << 8) | data[i + 3]
        if marker == 0xE1 and data[i + 4 : i + 10] == b"Exif\x00\x00":
            return None
        if marker in frames:
            if i + 10 > end or data[i + 9] not in (1, 3):
                return None
            height, width = (data[i + 5] << 8) | data[i + 6], (data[i + 7] << 8) | data[i + 8]
            return (width, height) if width and height else None
        if marker in _SOF or 0xC3 <= marker <= 0xCF or marker in (0xD9, 0xDA):  # other SOFs, end, scan before a frame
            return None
        i += 2 + length
    return None


def dali_native(opened: Opened) -> bool:
    """Whether DALI decodes this image exactly as iofeed's Pillow path does (RGB, no alpha)."""
    img = opened.image
    return img.format in ("JPEG", "PNG") and img.mode in ("RGB", "L") and "transparency" not in img.info


def encoded_for_dali(data: bytes) -> tuple[bytes, tuple[int, int]]:
    """(bytes DALI can decode, (width, height) after EXIF orientation). Raises SampleError.

    Plain JPEG and PNG go as they are (DALI applies EXIF orientation itself). Anything else
    (alpha composited on white, GIF, CMYK, 16-bit...) is converted by iofeed's Pillow path
    and handed over as an uncompressed PPM, so both engines see the same pixels.
    """
    size = jpeg_header(data)
    if size is not None:
        return data, size
    opened = open_image(data)
    if dali_native(opened):
        return data, opened.size
    image = decode_rgb(opened).image
    return b"P6\n%d %d\n255\n" % image.size + image.tobytes(), image.size
