"""What every backend yields, and the interface the loader drives."""
from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np


@dataclass
class Batch:
    """One batch. `images` is uint8 NHWC: a numpy view into shared memory (valid until the next
    batch is asked for) or, for GPU backends, a DLPack-capable device tensor."""

    images: Any
    labels: np.ndarray  # int64
    indices: np.ndarray  # sample indices delivered, in order
    skipped: list[tuple[int, str]] = field(default_factory=list)  # (sample index, reason)


class Backend(Protocol):
    """A batch producer driven by the loader."""

    name: str

    def run(self, epoch: int, batches: list[np.ndarray], start: int, rank: int) -> Iterator[Batch]:
        """Yield `batches[start:]` of `epoch`, in order."""

    def describe(self) -> dict[str, Any]:
        """Settings and memory, for `loader.stats`."""

    def close(self) -> None:
        """Release processes, threads and memory; idempotent."""
