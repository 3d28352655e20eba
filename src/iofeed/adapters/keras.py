"""Keras 3 adapter: what `model.fit` takes on the backend Keras runs on (TensorFlow, JAX, PyTorch)."""
from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator
from typing import Any

import keras
import numpy as np
from keras.src.trainers.data_adapters.data_adapter import DataAdapter

from ..engines.base import Batch
from ..errors import OptionError
from ..options.loader_options import LoaderOptions
from .base import EpochLoader
from .model_scale import check_model_input
from .normalize import PIXELS_AFFINE, Affine, options_affine, record_normalise_on


class KerasAdapter:
    """framework="keras": normalised float32 NHWC batches (Keras' channels_last) as the tensors of
    Keras' backend. On TensorFlow `iofeed.loader` returns the tf adapter's `tf.data.Dataset`; on
    JAX and PyTorch a Keras `DataAdapter` over the Loader (`.iofeed_loader`), yielding the JAX
    adapter's sharded `jax.Array`s or torch tensors. With a GPU the JAX and PyTorch backends get
    uint8 batches over the bus and normalise them there (the JAX adapter's jitted normaliser,
    `TorchBatches` on the CUDA device Keras' torch backend uses); TensorFlow's are normalised on
    the host (a `tf.data` map runs on the CPU), as are all of them without a GPU.
    `stats.settings["normalise_on"]` says which. Either way every `fit` epoch (and every
    validation pass) is one loader epoch."""

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
        """A `tf.data.Dataset` (TensorFlow backend) or a `KerasBatches` over `loader`. A sample
        transform's floats are handed over as they are: nothing normalised."""
        output = loader.backend.sample_output
        floats = output is not None and output.dtype != np.uint8
        record_normalise_on(loader, None if floats else getattr(self._convert, "normalise_on", None))
        return self._wrap(loader)

    def close(self) -> None:
        """Let go of engine memory the backend's conversion holds (CUDA copies pinned in place)."""
        getattr(self._convert, "close", lambda: None)()


class KerasBatches(DataAdapter):
    """A Loader as Keras' own data adapter (JAX and PyTorch backends): one loader epoch per fit
    epoch. `take(n)` and `repeat(count)` mean what they mean on the `tf.data.Dataset` the
    TensorFlow backend gets; other `tf.data` methods are refused in one line naming the fix."""

    def __init__(self, loader: Any, limit: int | None = None, passes: int | None = 1) -> None:
        self.iofeed_loader = loader
        self._limit, self._passes = limit, passes  # batches per pass (None: all); passes (None: endless)

    def take(self, count: int) -> KerasBatches:
        """The first `count` batches of a pass (tf.data's `take`): each new iteration begins that
        pass again, so fit's epochs see the same batches (`.iofeed_loader.set_epoch` moves on)."""
        if isinstance(count, bool) or not isinstance(count, int) or count < 1:
            raise OptionError(f"take(count) needs an int >= 1, got {count!r}")
        limit = count if self._limit is None else min(count, self._limit)
        return KerasBatches(self.iofeed_loader, limit, self._passes)

    def repeat(self, count: int | None = None) -> KerasBatches:
        """`count` passes back to back, each the loader's next epoch (None: endless; give fit a
        `steps_per_epoch`), as tf.data's `repeat`."""
        if count is not None and (isinstance(count, bool) or not isinstance(count, int) or count < 1):
            raise OptionError(f"repeat(count) needs an int >= 1 or None, got {count!r}")
        passes = None if count is None or self._passes is None else count * self._passes
        return KerasBatches(self.iofeed_loader, self._limit, passes)

    def __getattr__(self, name: str) -> Any:
        if name in TF_DATA_METHODS:
            raise AttributeError(f"framework='keras' on Keras' {keras.backend.backend()} backend is a Keras data "
                                 f"adapter, not a tf.data.Dataset: it has take() and repeat() but no .{name}(); "
                                 "do per-batch work with batch_transform= and per-image work with transform=")
        raise AttributeError(name)

    def _batches(self) -> Iterator[Any]:
        passes = itertools.count() if self._passes is None else range(self._passes)
        for _ in passes:
            yield from itertools.islice(self.iofeed_loader, self._limit)

    def get_numpy_iterator(self) -> Iterator[tuple[np.ndarray, np.ndarray]]:
        for images, labels in self._batches():
            yield np.asarray(images), np.asarray(labels)

    def get_jax_iterator(self) -> Iterator[Any]:
        return self._batches()

    def get_torch_dataloader(self) -> Any:
        return self.iofeed_loader if self._limit is None and self._passes == 1 else _Iterable(self._batches)

    @property
    def num_batches(self) -> int | None:
        check_model_input(self.iofeed_loader)  # Keras asks for this first, from the model's fit/evaluate
        if self._passes is None:
            return None
        per_pass = len(self.iofeed_loader) if self._limit is None else min(self._limit, len(self.iofeed_loader))
        return per_pass * self._passes

    @property
    def batch_size(self) -> int:
        return int(self.iofeed_loader.order.batch_size)

    @property
    def has_partial_batch(self) -> bool:
        return self.partial_batch_size is not None

    @property
    def partial_batch_size(self) -> int | None:
        order = self.iofeed_loader.order
        if order.drop_last or self._limit is not None:
            return None
        return order.per_rank % order.batch_size or None


TF_DATA_METHODS = frozenset({"map", "filter", "batch", "unbatch", "shuffle", "prefetch", "cache", "apply",
                             "skip", "shard", "flat_map", "interleave", "padded_batch", "rebatch", "with_options",
                             "as_numpy_iterator", "element_spec", "cardinality", "concatenate", "zip"})


class _Iterable:
    """An iterable whose every `iter()` calls `start()` (what Keras' torch backend iterates)."""

    def __init__(self, start: Callable[[], Iterator[Any]]) -> None:
        self._start = start

    def __iter__(self) -> Iterator[Any]:
        return self._start()


def _affine(options: LoaderOptions) -> Affine:
    """The recipe's normalisation; a uint8 recipe (`augment="uint8"`, normalize=False) gives 0-255
    floats on every backend, Keras' `image_dataset_from_directory` convention (JAX and TensorFlow
    handed out uint8 there, PyTorch floats: a model written on one broke on another)."""
    return options_affine(options) or PIXELS_AFFINE


def _tensorflow(options: LoaderOptions) -> tuple[Callable[[Batch], Any], Callable[[EpochLoader], Any]]:
    from .tf import TfAdapter

    adapter = TfAdapter(_affine(options), options.batch_transform)
    return adapter, adapter.wrap


def _jax(options: LoaderOptions) -> tuple[Callable[[Batch], Any], Callable[[EpochLoader], Any]]:
    from .jax import JaxAdapter

    adapter = JaxAdapter(options.dtype, options.sharding, _affine(options), options.batch_transform)
    return adapter, lambda loader: KerasBatches(adapter.wrap(loader))  # wrap: the layout checked now


def _torch(options: LoaderOptions) -> tuple[Callable[[Batch], Any], Callable[[EpochLoader], Any]]:
    from .keras_torch import TorchBatches, training_device

    return TorchBatches(_affine(options), options.batch_transform, training_device()), KerasBatches


# Keras backend name -> (per-batch conversion, what `iofeed.loader` returns over the Loader)
BACKENDS: dict[str, Callable[[LoaderOptions], tuple[Callable[[Batch], Any], Callable[[EpochLoader], Any]]]] = {
    "tensorflow": _tensorflow, "jax": _jax, "torch": _torch,
}
