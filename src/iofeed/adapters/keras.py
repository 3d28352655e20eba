"""Keras 3 adapter: what `model.fit` takes on the backend Keras runs on (TensorFlow, JAX, PyTorch)."""
from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import keras
import numpy as np
from keras.src.trainers.data_adapters.data_adapter import DataAdapter

from ..backends.base import Batch
from ..errors import OptionError
from ..options import LoaderOptions
from .base import EpochLoader
from .host_float import HostNormaliser
from .normalize import IMAGENET_AFFINE, options_affine
from .numpy import to_numpy


class KerasAdapter:
    """framework="keras": normalised float32 NHWC batches (Keras' channels_last) as the tensors of
    Keras' backend. On TensorFlow `iofeed.loader` returns the tf adapter's `tf.data.Dataset`; on
    JAX and PyTorch a Keras `DataAdapter` over the Loader (`.iofeed_loader`), yielding the JAX
    adapter's sharded `jax.Array`s or CPU torch tensors that share the host batch's memory.
    Either way every `fit` epoch (and every validation pass) is one loader epoch."""

    def __init__(self, backend: str, options: LoaderOptions) -> None:
        if backend not in BACKENDS:
            raise OptionError(f"framework='keras' runs on the {', '.join(BACKENDS)} backends, Keras uses {backend!r}: "
                              "set KERAS_BACKEND before importing keras")
        self.backend = backend
        self._convert, self._wrap = BACKENDS[backend](options)

    @classmethod
    def from_options(cls, options: LoaderOptions) -> KerasAdapter:
        """The adapter for Keras' current backend and `options` (the recipe's mean/std)."""
        return cls(keras.backend.backend(), options)

    def __call__(self, batch: Batch) -> Any:
        return self._convert(batch)

    def wrap(self, loader: EpochLoader) -> Any:
        """A `tf.data.Dataset` (TensorFlow backend) or a `KerasBatches` over `loader`."""
        return self._wrap(loader)


class KerasBatches(DataAdapter):
    """A Loader as Keras' own data adapter (JAX and PyTorch backends): one loader epoch per fit epoch."""

    def __init__(self, loader: Any) -> None:
        self.iofeed_loader = loader

    def get_numpy_iterator(self) -> Iterator[tuple[np.ndarray, np.ndarray]]:
        for images, labels in self.iofeed_loader:
            yield np.asarray(images), np.asarray(labels)

    def get_jax_iterator(self) -> Iterator[Any]:
        return iter(self.iofeed_loader)

    def get_torch_dataloader(self) -> Any:
        return self.iofeed_loader

    @property
    def num_batches(self) -> int:
        return len(self.iofeed_loader)

    @property
    def batch_size(self) -> int:
        return self.iofeed_loader.order.batch_size

    @property
    def has_partial_batch(self) -> bool:
        return self.partial_batch_size is not None

    @property
    def partial_batch_size(self) -> int | None:
        order = self.iofeed_loader.order
        if order.drop_last:
            return None
        return order.per_rank % order.batch_size or None


def _tensorflow(options: LoaderOptions) -> tuple[Callable[[Batch], Any], Callable[[EpochLoader], Any]]:
    from .tf import TfAdapter

    adapter = TfAdapter.from_options(options)
    return adapter, adapter.wrap


def _jax(options: LoaderOptions) -> tuple[Callable[[Batch], Any], Callable[[EpochLoader], Any]]:
    from .jax import JaxAdapter

    return JaxAdapter.from_options(options), KerasBatches


def _torch(options: LoaderOptions) -> tuple[Callable[[Batch], Any], Callable[[EpochLoader], Any]]:
    import torch

    normalise = HostNormaliser(np.float32, options_affine(options) or IMAGENET_AFFINE)

    def convert(batch: Batch) -> tuple[Any, Any]:
        images, labels = to_numpy(batch)  # torch keeps a reference to the array: reused once it lets go
        out = torch.from_numpy(normalise(images))
        batch.release()
        return out, torch.from_numpy(np.array(labels, np.int64))

    return convert, KerasBatches


# Keras backend name -> (per-batch conversion, what `iofeed.loader` returns over the Loader)
BACKENDS: dict[str, Callable[[LoaderOptions], tuple[Callable[[Batch], Any], Callable[[EpochLoader], Any]]]] = {
    "tensorflow": _tensorflow, "jax": _jax, "torch": _torch,
}
