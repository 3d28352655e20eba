"""numpy adapter: uint8 NHWC images and int64 labels, without copying."""
from __future__ import annotations

from typing import Any

import numpy as np

from ..augment.transforms import BatchTransform
from ..engines.base import Batch
from ..options.loader_options import LoaderOptions
from .base import EpochLoader
from .normalize import record_normalise_on


def to_numpy(batch: Batch) -> tuple[np.ndarray, np.ndarray]:
    """(images uint8 NHWC, labels int64), as the engine hands them over (host arrays, since this
    adapter asks for them): images may lie in engine memory, lent until they are dropped."""
    return batch.images, batch.labels


class NumpyAdapter:
    """The numpy framework: `to_numpy` per batch, then the `batch_transform` if any; `iofeed.loader`
    returns the Loader itself. (Images stay uint8: the recipe's mean/std are for torch and tf.)"""

    def __init__(self, batch_transform: Any = None) -> None:
        self._batch_transform = None if batch_transform is None else BatchTransform(batch_transform)

    @classmethod
    def from_options(cls, options: LoaderOptions) -> NumpyAdapter:
        """The adapter for `options`: its batch transform."""
        return cls(options.batch_transform)

    def __call__(self, batch: Batch) -> tuple[np.ndarray, np.ndarray]:
        images, labels = to_numpy(batch)
        if self._batch_transform is not None:
            return self._batch_transform(images, labels, batch.key)
        return images, labels

    def wrap(self, loader: EpochLoader) -> EpochLoader:
        """The loader itself (`stats.settings["normalise_on"]` None: uint8 as stored)."""
        record_normalise_on(loader, None)
        return loader
