"""The engine contract, written once: the batch every engine yields, the interface the loader
drives, the per-batch RNG key and the skip-or-raise policy for samples that cannot be read."""
from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np

from ..augment.batch_key import BatchKey
from ..augment.transform_checks import TransformedImage
from ..errors import SampleError
from .lease import Lease

SKIP_HINT = " (pass skips=iofeed.Skips(on_error='skip') to skip such samples)"


@dataclass
class Batch:
    """One batch. `images` is uint8 NHWC: a numpy array whenever the consumer wants host arrays
    (`LoaderOptions.host`); otherwise an engine decoding on a GPU hands over a DLPack-capable
    device tensor. A batch whose samples were all skipped has no images (`indices` empty).

    Images in engine memory that the engine reuses carry a `lease` (`engines/lease.py`): the
    memory stays this batch's until an adapter that copied it calls `release()`, or the last
    array over it is dropped. Labels and indices are the batch's own arrays."""

    images: Any
    labels: np.ndarray  # int64 class indices (a dataset may also hold float targets: kept as they are)
    indices: np.ndarray  # sample indices delivered, in order
    skipped: list[tuple[int, str]] = field(default_factory=list)  # (sample index, reason)
    transform_seconds: float = 0.0  # CPU time the user's per-sample transform took for this batch
    cpu_seconds: float = 0.0  # CPU time the worker took for the whole batch (workers engine)
    key: BatchKey | None = None  # its RNG key, set by the loader (seeds `batch_transform`)
    transform_wall_seconds: float = 0.0  # wall time of the per-sample transform for this batch
    lease: Lease | None = None  # the engine memory `images` lies in, until released
    region: tuple[int, int] | None = None  # (address, bytes) of that memory's whole block: pinnable once
    copied: bool = False  # copied out of engine memory: the consumer held all the engine could lend
    refilled: int = 0  # skipped samples whose places spare samples took (`engines/refill.py`)
    geometry: Any = None  # target="boxes"/"masks": each image's crop, flip and mask (`workers/target_slots.py`)
    tokens: tuple[np.ndarray, np.ndarray] | None = None  # Output(tokenizer=): (lengths, ids back to back) per sample
    targets: Any = None  # the same with `transform=`: the boxes, labels, masks it returned (`PackedTargets`)

    def release(self) -> None:
        """Give the engine memory under `images` back now: for an adapter once its copy of them is
        done (the images must not be read after)."""
        if self.lease is not None:
            self.lease.release()


class Engine(Protocol):
    """A batch producer driven by the loader; built by its registry entry from (source, options)."""

    name: str
    starts_ahead: int  # batches of `following` it would start during a pass now (0: it never runs ahead)
    sample_output: TransformedImage | None  # what its sample transform returns per image (None: no transform)

    def run(self, epoch: int, batches: list[np.ndarray], start: int, rank: int,
            following: list[np.ndarray] | None = None) -> Iterator[Batch]:
        """Yield `batches[start:]` of `epoch`, in order; batch k's crops drawn from `BatchKey`.
        `following` is epoch + 1's order, which an engine may start on before the next pass asks."""

    def describe(self) -> dict[str, Any]:
        """Settings and memory, for `loader.stats`."""

    def close(self) -> None:
        """Release processes, threads and memory; idempotent."""


def sample_failure(on_error: str, path: str, reason: str) -> SampleError | None:
    """The skip-or-raise policy for a sample that cannot be read: None when it is to be skipped
    (the engine reports it in `Batch.skipped`, the loader counts it), else the error to raise,
    naming the file and how to skip instead."""
    if on_error == "raise":
        return SampleError(f"{path}: {reason}{SKIP_HINT}")
    return None
