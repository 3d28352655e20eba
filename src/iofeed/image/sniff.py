"""Recognise an image format from a file's first bytes, never from its name."""
from __future__ import annotations

from pathlib import Path

SNIFF_BYTES = 16

_SIGNATURES: tuple[tuple[bytes, str], ...] = (
    (b"\xff\xd8\xff", "jpeg"),
    (b"\x89PNG\r\n\x1a\n", "png"),
    (b"GIF87a", "gif"),
    (b"GIF89a", "gif"),
    (b"BM", "bmp"),
    (b"II*\x00", "tiff"),
    (b"MM\x00*", "tiff"),
)


def sniff_bytes(head: bytes) -> str | None:
    """Format name ("jpeg", "png", "gif", "bmp", "tiff", "webp") of data starting with `head`, or None."""
    if head[:4] == b"RIFF" and head[8:12] == b"WEBP":
        return "webp"
    for magic, name in _SIGNATURES:
        if head.startswith(magic):
            return name
    return None


def sniff_file(path: Path) -> str | None:
    """Format name of the file at `path` from its first bytes, or None if it is not an image."""
    with open(path, "rb") as f:
        return sniff_bytes(f.read(SNIFF_BYTES))
