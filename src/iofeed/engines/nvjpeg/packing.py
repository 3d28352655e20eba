"""Slots of the `nvjpeg` engine: each batch's compressed JPEG bytes packed back to back, with each
sample's size, crop box and flip, so that the consumer decodes the batch in one call.

A worker reads and packs; it decodes nothing, except the images a GPU decoder would not decode as
the workers engine does (not a sequential Huffman JPEG: progressive, CMYK, EXIF-oriented, PNG,
...): those it decodes and augments itself (`decode_augmented`, the workers engine's own path)
and packs as finished `side` x `side` pixels.
"""
from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from ...errors import SampleError
from ...image.boxes import Augment
from ...image.pil import check_pixels
from ...sources.sample_reader import SampleReader
from ...sources.samples import SampleSource
from ..dali.inputs import SEQUENTIAL, jpeg_header
from ..workers.decode import decode_augmented

JPEG, PIXELS = 0, 1  # what a sample's bytes are: a JPEG for the batched decode, or finished pixels

META = np.dtype([("offset", np.int64), ("length", np.int64), ("height", np.int32), ("width", np.int32),
                 ("box", np.float32, 4), ("flip", np.bool_), ("kind", np.uint8)])


@dataclass
class EncodedImages:
    """One batch as a worker packed it: sample k is `data[offset:offset + length]`, a JPEG of
    (height, width) to crop to `box` (left, top, right, bottom, whole pixels) and mirror if `flip`,
    or (`kind` PIXELS) its finished (side, side, 3) uint8 pixels."""

    data: np.ndarray  # uint8, flat (lent with the slot)
    meta: np.ndarray  # META rows, one per sample

    def __len__(self) -> int:
        return len(self.meta)

    @property
    def used_bytes(self) -> int:
        """Bytes of `data` the batch uses."""
        return int(self.meta["offset"][-1] + self.meta["length"][-1]) if len(self.meta) else 0

    def copy(self) -> EncodedImages:
        """The same batch in memory of its own (the bytes it uses only)."""
        return EncodedImages(np.array(self.data[: self.used_bytes]), self.meta.copy())


def sample_bounds(source: SampleSource, side: int) -> np.ndarray:
    """The most bytes each sample may take in a slot: its stored size, or its finished pixels when
    larger (a folder's file sizes are read from the file system; one that cannot be read counts
    as pixels)."""
    sizes = source.size.astype(np.int64)
    if source.kind == "folder":
        sizes = np.array([_file_size(path) for path in source.files], np.int64)[source.file_id]
    return np.maximum(sizes, side * side * 3)


def _file_size(path: bytes) -> int:
    try:
        return os.stat(path).st_size
    except OSError:
        return 0


@dataclass(frozen=True)
class EncodedLayout:
    """Slots of packed JPEG bytes: each holds the largest possible batch (the `batch_size` largest
    `sample_bounds`), so any order of the epoch fits. `bad` holds the samples known not to decode
    (checked before the first epoch): skipped without a read, as the `dali` engine does."""

    slots: int
    batch_size: int
    side: int
    capacity: int  # bytes per slot
    bad: dict[int, str] = field(default_factory=dict)

    @classmethod
    def for_source(cls, source: SampleSource, slots: int, batch_size: int, side: int,
                   bad: dict[int, str]) -> EncodedLayout:
        bounds = np.sort(sample_bounds(source, side))[::-1]
        return cls(slots, batch_size, side, int(bounds[:batch_size].sum()) if len(bounds) else 0, bad)

    @property
    def total_bytes(self) -> int:
        per_slot = -(-self.capacity // 8) * 8 + self.batch_size * (META.itemsize + 8)
        return self.slots * per_slot

    def views(self, buffer: memoryview) -> tuple[tuple[np.ndarray, np.ndarray], np.ndarray]:
        """((bytes[slot, byte], meta[slot, i]), labels[slot, i]) over `buffer`."""
        stride = -(-self.capacity // 8) * 8
        data = np.ndarray((self.slots, self.capacity), np.uint8, buffer, strides=(stride, 1))
        meta_at = self.slots * stride
        meta = np.ndarray((self.slots, self.batch_size), META, buffer, offset=meta_at)
        labels = np.ndarray((self.slots, self.batch_size), np.int64, buffer,
                            offset=meta_at + self.slots * self.batch_size * META.itemsize)
        return (data, meta), labels

    @staticmethod
    def slot(payload: tuple[np.ndarray, np.ndarray], slot: int) -> tuple[np.ndarray, np.ndarray]:
        """The payload of one slot."""
        return payload[0][slot], payload[1][slot]

    def write(self, slot_payload: tuple[np.ndarray, np.ndarray], k: int, reader: SampleReader,
              source: SampleSource, index: int, augment: Augment, rng: np.random.Generator) -> None:
        """Pack sample `index` as sample `k`: its JPEG bytes with the box and flip drawn for it (the
        workers engine's draws, in the same order), or its finished pixels. Raises SampleError.

        A JPEG goes as it is only while the bytes left hold the rest of the batch as finished
        pixels (a file grown since its size was read is decoded here instead): so a batch always fits."""
        if index in self.bad:
            raise SampleError(self.bad[index])
        data, meta = slot_payload
        start = int(meta[k - 1]["offset"] + meta[k - 1]["length"]) if k else 0
        encoded = reader.read(index)
        size = jpeg_header(encoded, SEQUENTIAL)
        pixels = self.side * self.side * 3
        if size is not None and start + len(encoded) + (self.batch_size - k - 1) * pixels <= self.capacity:
            check_pixels(*size)
            (left, top, right, bottom), flip = augment.box(*size, rng)
            data[start:start + len(encoded)] = np.frombuffer(encoded, np.uint8)
            box = whole_box(left, top, right, bottom)
            meta[k] = (start, len(encoded), size[1], size[0], box, flip, JPEG)
            return
        out = data[start:start + pixels].reshape(self.side, self.side, 3)
        decode_augmented(encoded, augment, rng, out)
        meta[k] = (start, pixels, self.side, self.side, (0, 0, self.side, self.side), False, PIXELS)

    @staticmethod
    def images(slot_payload: tuple[np.ndarray, np.ndarray], n: int,
               wrap: Callable[[np.ndarray], np.ndarray] = np.asarray) -> EncodedImages:
        """The first `n` samples of a slot, for the consumer: the bytes `wrap`ped (leased), the
        small per-sample rows copied."""
        return EncodedImages(wrap(slot_payload[0]), slot_payload[1][:n].copy())


def whole_box(left: float, top: float, right: float, bottom: float) -> tuple[int, int, int, int]:
    """The box rounded to whole pixels, as the workers engine crops it (`image/resize.py`), at
    least one pixel wide and high."""
    x0, y0, x1, y1 = (int(round(v)) for v in (left, top, right, bottom))
    return x0, y0, max(x1, x0 + 1), max(y1, y0 + 1)

