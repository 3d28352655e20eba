"""numpy adapter: uint8 NHWC images and int64 labels, without copying."""
from __future__ import annotations

import numpy as np

from ..backends.base import Batch
from ..options import LoaderOptions
from .base import EpochLoader


def to_numpy(batch: Batch) -> tuple[np.ndarray, np.ndarray]:
    """(images uint8 NHWC, labels int64). Views into shared memory: copy them to keep them past
    the next batch. The engine hands over host arrays, since this adapter asks for them."""
    return batch.images, batch.labels


class NumpyAdapter:
    """The numpy framework: `to_numpy` per batch; `iofeed.loader` returns the Loader itself."""

    @classmethod
    def from_options(cls, options: LoaderOptions) -> NumpyAdapter:
        """The adapter for `options` (it has nothing to set up)."""
        return cls()

    def __call__(self, batch: Batch) -> tuple[np.ndarray, np.ndarray]:
        return to_numpy(batch)

    def wrap(self, loader: EpochLoader) -> EpochLoader:
        """The loader itself."""
        return loader
