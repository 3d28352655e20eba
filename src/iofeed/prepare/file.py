"""One source file → what the dataset stores for it (the per-file work every engine runs)."""
from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import SampleError
from ..format.policy import ImagePolicy
from ..image.fastjpeg import check_strictly
from ..image.pil import Opened, decode_rgb, encode_jpeg, is_progressive, open_image, resize_shorter

Span = tuple[int, int]  # (offset, size) of an input inside its file; size -1: the whole file
WHOLE: Span = (0, -1)
JPEG_SIZE_SAMPLING = 16  # one raw sample in this many is also encoded, to estimate the JPEG form's size


@dataclass(frozen=True)
class Prepared:
    """The result of preparing one source file: its encoded data (`encoding` "jpeg" or "raw")
    or a rejection reason, and facts."""

    index: int
    data: bytes | None
    reason: str | None = None
    facts: dict[str, Any] = field(default_factory=dict)
    encoding: str = "jpeg"


def read_input(path: str, span: Span = WHOLE) -> bytes:
    """The bytes of one input: the whole file, or `span` (offset, size) of it (a tar member, a
    spooled Parquet cell)."""
    offset, size = span
    if size < 0:
        return Path(path).read_bytes()
    with open(path, "rb") as f:
        data = os.pread(f.fileno(), size, offset)
    if len(data) != size:
        raise SampleError(f"truncated input: {size} bytes at {offset}, got {len(data)}")
    return data


def prepare_file(index: int, path: str, policy: ImagePolicy, span: Span = WHOLE) -> Prepared:
    """Decode, convert and resize one file, or the `span` of it holding one image (runs in a
    worker process).

    A baseline RGB JPEG that needs no resizing, rotation or raw storage is kept byte for byte:
    it is only decoded at 1/8 DCT scale, which reads (and so validates) its whole stream at a
    fraction of a full decode's cost.
    """
    try:
        data = read_input(path, span)
        target = policy.side
        opened = open_image(data)
        keep = _keepable(opened, policy)
        decoded = decode_rgb(opened, min_size=(1, 1) if keep else (target, target))
        if keep:  # stored as it came: it must pass the loader's strict decoder too
            check_strictly(data)
    except SampleError as exc:
        return Prepared(index, None, str(exc))
    except OSError as exc:
        return Prepared(index, None, f"unreadable ({exc.strerror})")
    facts = {
        "bytes_in": len(data),
        "digest": hashlib.blake2b(data, digest_size=16).hexdigest(),  # images stored twice are reported
        "width_in": decoded.original_size[0],
        "height_in": decoded.original_size[1],
        "mode_in": decoded.original_mode,
        "format_in": decoded.format,
        "progressive_in": decoded.progressive,
        "oriented": decoded.oriented,
    }
    if keep:
        facts.update(width=opened.size[0], height=opened.size[1], kept_original=True)
        return Prepared(index, data, None, facts)
    image = resize_shorter(decoded.image, target)
    facts.update(width=image.width, height=image.height, kept_original=False)
    if policy.stores_raw(*image.size):
        if index % JPEG_SIZE_SAMPLING == 0:  # for the disk size of the same dataset as JPEG
            facts["jpeg_bytes"] = len(encode_jpeg(image, policy.quality))
        return Prepared(index, image.tobytes(), None, facts, "raw")
    return Prepared(index, encode_jpeg(image, policy.quality), None, facts)


def _keepable(opened: Opened, policy: ImagePolicy) -> bool:
    """Whether the file can be stored as it came: a baseline RGB JPEG, upright, not larger than
    the target, and not one to store as raw pixels."""
    img = opened.image
    return (
        img.format == "JPEG"
        and img.mode == "RGB"
        and not is_progressive(img.info)
        and opened.orientation == 1
        and min(opened.size) <= policy.side
        and not policy.stores_raw(*opened.size)
    )


Task = tuple[int, str, ImagePolicy, Span]  # index, file, policy, span of the file
