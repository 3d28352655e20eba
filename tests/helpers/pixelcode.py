"""Pixel-coded samples: an image of SIDE x SIDE pixels in three flat regions, the top half the
colour of its label's code (one of 27), the bottom-left and bottom-right halves of the lower half
the two base-27 digits of its sample number. `decode` reads both back from any delivered image
(resized, re-encoded), so a mislabel, a loss, a duplicate or a swap shows end to end. `Item` and
`Source` say what an adversarial source (`adversarial.py`) holds and what must come of it."""
from __future__ import annotations

import io
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from PIL import Image

LEVELS = (30, 128, 225)  # per channel: 27 colours, far apart after JPEG
SIDE = 32  # 16 px regions: whole JPEG blocks (and 4:2:0 chroma blocks), never resized by preprocess
CODES = len(LEVELS) ** 3


def colour(code: int) -> tuple[int, int, int]:
    """The colour of code 0..26."""
    assert 0 <= code < CODES, code
    return LEVELS[code // 9], LEVELS[code // 3 % 3], LEVELS[code % 3]


def coded_pixels(label_code: int, sample: int) -> np.ndarray:
    """SIDE x SIDE RGB: the label's colour on top, the sample number's two digits below."""
    assert 0 <= sample < CODES * CODES, sample
    image = np.empty((SIDE, SIDE, 3), np.uint8)
    half = SIDE // 2
    image[:half] = colour(label_code)
    image[half:, :half] = colour(sample // CODES)
    image[half:, half:] = colour(sample % CODES)
    return image


def coded_jpeg(label_code: int, sample: int) -> bytes:
    out = io.BytesIO()
    Image.fromarray(coded_pixels(label_code, sample)).save(out, "JPEG", quality=95)
    return out.getvalue()


def _code_at(region: np.ndarray) -> int:
    mean = region.reshape(-1, 3).mean(axis=0)
    digits = [int(np.argmin([abs(m - level) for level in LEVELS])) for m in mean]
    return digits[0] * 9 + digits[1] * 3 + digits[2]


def decode(image: np.ndarray) -> tuple[int, int]:
    """(label code, sample number) of a delivered uint8 HWC image of any size (the centre of
    each region, away from edges that resizing blurs)."""
    h, w = image.shape[:2]
    top = image[h // 8: 3 * h // 8, w // 4: 3 * w // 4]
    left = image[5 * h // 8: 7 * h // 8, w // 8: 3 * w // 8]
    right = image[5 * h // 8: 7 * h // 8, 5 * w // 8: 7 * w // 8]
    return _code_at(top), _code_at(left) * CODES + _code_at(right)


@dataclass
class Item:
    """One sample as the source holds it: its number, the label value written (any type), and the
    class name it must arrive with (None: it must be rejected, or the run refused)."""

    sample: int
    label: Any
    expect: str | None


@dataclass
class Source:
    """An adversarial source ready to `preprocess` or `index`, and what must come of it."""

    kind: str
    damage: str
    spec: str  # what is passed to preprocess / index: a path, a brace list
    items: list[Item]
    names: list[str]  # label code -> the class name it stands for
    options: dict[str, Any] = field(default_factory=dict)  # preprocess keywords (labels=, label_column=)
    shards: list[Path] = field(default_factory=list)  # WebDataset shards written
    refusal: str | None = None  # a regex: the run (or the loader) must fail with a one-line error matching it
    lenient: set[int] = field(default_factory=set)  # samples a damage may cost, if rejected by name or shard
    after: Callable[[Path], str] | None = None  # damage done after the run; returns the loader's expected error
    strays: set[str] = field(default_factory=set)  # names of inputs that hold no sample (a FIFO), rejected too
    says: str | None = None  # a regex: a run that succeeds must print it (a note in its summary)

    @property
    def written(self) -> int:
        return len(self.items)

    def kept(self) -> dict[int, str]:
        """{sample: class name} of the samples that must arrive."""
        return {i.sample: i.expect for i in self.items if i.expect is not None and i.sample not in self.lenient}


def code_of(names: list[str], expect: str | None) -> int:
    if expect is None:
        return CODES - 1
    if expect not in names:
        names.append(expect)
    return names.index(expect)


def jpeg_of(names: list[str], item: Item) -> bytes:
    return coded_jpeg(code_of(names, item.expect), item.sample)


def int_items(count: int, classes: int = 3, first: int = 0) -> list[Item]:
    """`count` samples with integer labels 0..classes-1 (class names "0", "1", ...)."""
    return [Item(first + i, i % classes, str(i % classes)) for i in range(count)]
