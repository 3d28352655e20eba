"""The slots workers decode into: a ring of whole batches in one shared-memory block, and its size."""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np

from ...image.boxes import Augment
from ...runtime.system import RankAllowance, usable_memory
from ...sources.sample_reader import SampleReader
from ...sources.samples import SampleSource
from .decode import load_augmented

# Batches in flight at least, whatever the worker count: with few workers sharing the cores with
# the consumer, a shallow queue runs dry whenever the scheduler preempts the consumer (raw pixels,
# 2 workers on 2 cores: 6.2k img/s with 4 in flight, 6.7k with 8).
MIN_PREFETCH = 8


def default_prefetch(workers: int) -> int:
    """Batches in flight by default: two per worker, at least MIN_PREFETCH."""
    return max(2 * workers, MIN_PREFETCH)


@dataclass(frozen=True)
class SlotLayout:
    """Slots of augmented images: [slot, i, y, x, c] uint8, and labels, in one shared block. With a
    sample transform, each image has the transform's fixed `shape` (H, W, C) and `dtype` instead."""

    slots: int
    batch_size: int
    side: int
    shape: tuple[int, ...] | None = None  # per image; None: (side, side, 3)
    dtype: str = "|u1"

    @property
    def image_shape(self) -> tuple[int, ...]:
        return self.shape or (self.side, self.side, 3)

    @property
    def image_bytes(self) -> int:
        raw = self.slots * self.batch_size * int(np.prod(self.image_shape)) * np.dtype(self.dtype).itemsize
        return -(-raw // 8) * 8  # the labels after them stay 8-byte aligned

    @property
    def total_bytes(self) -> int:
        return self.image_bytes + self.slots * self.batch_size * 8

    def views(self, buffer: memoryview) -> tuple[np.ndarray, np.ndarray]:
        """(images[slot, i, y, x, c], labels[slot, i] int64) over `buffer`."""
        images = np.ndarray((self.slots, self.batch_size, *self.image_shape), np.dtype(self.dtype), buffer)
        labels = np.ndarray((self.slots, self.batch_size), np.int64, buffer, offset=self.image_bytes)
        return images, labels

    @staticmethod
    def slot(payload: np.ndarray, slot: int) -> np.ndarray:
        """The images of one slot."""
        view: np.ndarray = payload[slot]
        return view

    @staticmethod
    def write(slot_payload: np.ndarray, k: int, reader: SampleReader, source: SampleSource, index: int,
              augment: Augment, rng: np.random.Generator) -> None:
        """Decode and augment sample `index` into image `k` of the slot. Raises SampleError."""
        load_augmented(reader, source, index, augment, rng, slot_payload[k])

    @staticmethod
    def images(slot_payload: np.ndarray, n: int, wrap: Callable[[np.ndarray], np.ndarray] = np.asarray) -> np.ndarray:
        """The first `n` images of a slot, for the consumer: a view, `wrap`ped (leased)."""
        return wrap(slot_payload[:n])


class Layout(Protocol):
    """What the engine and its workers ask of a slot layout: `SlotLayout`, `PackedLayout`,
    `TargetLayout` (and `TransformedTargetLayout`), the nvjpeg engine's `EncodedLayout`. A payload
    is whatever the layout's own `views` made (an array, or a tuple of arrays) and only ever goes
    back to that layout: it is `Any` here because this one type cannot pair each layout with its
    own payload's type."""

    @property
    def slots(self) -> int: ...

    @property
    def total_bytes(self) -> int: ...

    def views(self, buffer: memoryview) -> tuple[Any, np.ndarray]: ...

    def slot(self, payload: Any, slot: int) -> Any: ...

    def write(self, slot_payload: Any, k: int, reader: SampleReader, source: SampleSource, index: int,
              augment: Augment, rng: np.random.Generator) -> None: ...

    def images(self, slot_payload: Any, n: int, wrap: Callable[[np.ndarray], np.ndarray] = ...) -> Any: ...


def default_memory_budget() -> RankAllowance:
    """A quarter of the memory this rank may use (`system.usable_memory`)."""
    usable = usable_memory()
    return RankAllowance(usable.amount // 4, f"a quarter of {usable.amount:,} bytes: {usable.because}")
