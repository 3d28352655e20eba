"""Batch slots for `gpu_augment`: stored pixels packed back to back, with each sample's crop box
and flip, so that the crop, resize and flip run on the device (see `iofeed.adapters.torch.gpu_augment`).

The CPU only gathers bytes: raw samples are copied from the memory map as they are; JPEG
samples of a mixed dataset are decoded at their stored size.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from ...errors import OptionError, SampleError
from ...format.table import RAW
from ...image.boxes import Augment
from ...image.pil import open_rgb
from ...sources.sample_reader import SampleReader
from ...sources.samples import SampleSource

_META = np.dtype([("offset", np.int64), ("height", np.int64), ("width", np.int64),
                  ("box", np.float32, 4), ("flip", np.bool_)])


def _end(row: np.void) -> int:
    """The byte after the pixels of the sample `row` describes."""
    return int(row["offset"] + row["height"] * row["width"] * 3)


@dataclass
class PackedImages:
    """One batch of stored pixels: sample k is `data[offset:offset + height * width * 3]`,
    (height, width, 3) uint8; `box` (left, top, right, bottom) is its crop, `flip` its mirror."""

    data: np.ndarray  # uint8, flat
    meta: np.ndarray  # _META rows, one per sample

    def __len__(self) -> int:
        return len(self.meta)

    @property
    def used_bytes(self) -> int:
        """Bytes of `data` that hold pixels."""
        return _end(self.meta[-1]) if len(self.meta) else 0

    def copy(self) -> PackedImages:
        """The same batch in memory of its own (the pixels it uses only)."""
        return PackedImages(np.array(self.data[: self.used_bytes]), self.meta.copy())


def sample_bytes(source: SampleSource) -> np.ndarray:
    """Stored pixel bytes of each sample (needs the sizes an iofeed dataset records)."""
    sizes = source.width.astype(np.int64) * source.height.astype(np.int64) * 3
    if source.kind != "dataset" or not len(sizes) or sizes.min() <= 0:
        raise OptionError("gpu_augment=True reads an iofeed dataset (it needs each sample's stored size): "
                          "run `iofeed preprocess --format raw` first")
    return sizes


@dataclass(frozen=True)
class PackedLayout:
    """Slots of packed stored pixels: each holds the largest possible batch (the `batch_size`
    largest samples), so that any order of the epoch fits."""

    slots: int
    batch_size: int
    capacity: int  # pixel bytes per slot

    @classmethod
    def for_source(cls, source: SampleSource, slots: int, batch_size: int) -> PackedLayout:
        """A layout whose slots hold any batch of `source`."""
        sizes = np.sort(sample_bytes(source))[::-1]
        return cls(slots, batch_size, int(sizes[:batch_size].sum()))

    @property
    def total_bytes(self) -> int:
        return self.slots * (self.capacity + self.batch_size * (_META.itemsize + 8))

    def views(self, buffer: memoryview) -> tuple[tuple[np.ndarray, np.ndarray], np.ndarray]:
        """((pixels[slot, byte], meta[slot, i]), labels[slot, i]) over `buffer`."""
        pixels = np.ndarray((self.slots, self.capacity), np.uint8, buffer)
        meta_at = self.slots * self.capacity
        meta = np.ndarray((self.slots, self.batch_size), _META, buffer, offset=meta_at)
        labels = np.ndarray((self.slots, self.batch_size), np.int64, buffer,
                            offset=meta_at + self.slots * self.batch_size * _META.itemsize)
        return (pixels, meta), labels

    @staticmethod
    def slot(payload: tuple[np.ndarray, np.ndarray], slot: int) -> tuple[np.ndarray, np.ndarray]:
        """The payload of one slot."""
        return payload[0][slot], payload[1][slot]

    @staticmethod
    def write(slot_payload: tuple[np.ndarray, np.ndarray], k: int, reader: SampleReader, source: SampleSource,
              index: int, augment: Augment, rng: np.random.Generator) -> None:
        """Copy sample `index`'s stored pixels in as sample `k`, with the box and flip drawn for it
        (the same draws as the CPU path, so both give the same crops). Raises SampleError."""
        pixels, meta = slot_payload
        width, height = int(source.width[index]), int(source.height[index])
        if source.encoding[index] == RAW:
            stored = reader.pixels(index)
        else:
            stored = np.asarray(open_rgb(reader.read(index)).image)
            if stored.shape[:2] != (height, width):
                raise SampleError(f"decoded to {stored.shape[1]}x{stored.shape[0]}, the index says {width}x{height}")
        box, flip = augment.box(width, height, rng)
        start = _end(meta[k - 1]) if k else 0
        pixels[start:start + stored.size] = stored.reshape(-1)
        meta[k] = (start, height, width, box, flip)

    @staticmethod
    def images(slot_payload: tuple[np.ndarray, np.ndarray], n: int,
               wrap: Callable[[np.ndarray], np.ndarray] = np.asarray) -> PackedImages:
        """The first `n` samples of a slot, for the consumer: the pixels `wrap`ped (leased), the
        small per-sample rows copied."""
        return PackedImages(wrap(slot_payload[0]), slot_payload[1][:n].copy())
