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
from .normalised_twice import check_model_input
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
        self.keras_backend = backend  # TensorFlow, JAX or PyTorch: the targets path asks
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
        output = loader.engine.sample_output
        floats = output is not None and output.dtype != np.uint8
        record_normalise_on(loader, None if floats else getattr(self._convert, "normalise_on", None))
        return self._wrap(loader)

    def close(self) -> None:
        """Let go of engine memory the backend's conversion holds (CUDA copies pinned in place)."""
        getattr(self._convert, "close", lambda: None)()


class KerasBatches(DataAdapter):  # type: ignore[misc]  # keras ships no types: DataAdapter is Any here
    """A Loader as Keras' own data adapter (JAX and PyTorch backends): one loader epoch per fit
    epoch, and iterable as the `tf.data.Dataset` the TensorFlow backend gets is (`for images,
    labels in data.take(1)`: the backend's tensors). `take`, `skip`, `repeat`, `map`, `prefetch`,
    `apply` and `as_numpy_iterator` mean what they mean in tf.data, over a stream whose every
    `iter()` is a new pass of the loader; the other tf.data methods are refused in one line naming
    what to do instead (`REFUSED`)."""

    def __init__(self, loader: Any, steps: tuple[tuple[str, Any], ...] = ()) -> None:
        self.iofeed_loader = loader
        self._steps = steps  # tf.data steps applied in order to the loader's passes: ("take", n), ...

    def _then(self, step: str, value: Any) -> KerasBatches:
        return KerasBatches(self.iofeed_loader, (*self._steps, (step, value)))

    def take(self, count: int) -> KerasBatches:
        """The first `count` batches (tf.data's `take`): each new iteration begins the pass it left
        again, so fit's epochs see the same batches (`.iofeed_loader.set_epoch` moves on)."""
        return self._then("take", _count("take", count))

    def skip(self, count: int) -> KerasBatches:
        """All but the first `count` batches (tf.data's `skip`)."""
        return self._then("skip", _count("skip", count))

    def repeat(self, count: int | None = None) -> KerasBatches:
        """`count` passes back to back, each the loader's next epoch (None: endless; give fit a
        `steps_per_epoch`), as tf.data's `repeat`."""
        return self._then("repeat", None if count is None else _count("repeat", count))

    def map(self, function: Callable[..., Any], num_parallel_calls: Any = None, deterministic: Any = None,
            name: Any = None) -> KerasBatches:
        """`function(images, labels)` on every batch, in this process after `batch_transform=`, on
        the backend's tensors (Keras preprocessing layers run there): tf.data's `map` over batches.
        `num_parallel_calls`, `deterministic` and `name` are accepted for tf.data's sake."""
        if not callable(function):
            raise OptionError(f"map(function) needs a callable, got {function!r}")
        return self._then("map", function)

    def prefetch(self, buffer_size: Any = None, name: Any = None) -> KerasBatches:
        """The same batches: the loader's workers already prepare `Resources.prefetch` batches ahead."""
        return self

    def apply(self, transformation: Callable[[KerasBatches], Any]) -> Any:
        """`transformation(self)`, as tf.data's `apply`."""
        return transformation(self)

    def as_numpy_iterator(self) -> Iterator[Any]:
        """The batches as numpy arrays."""
        for batch in self:
            yield tuple(np.asarray(part) for part in batch) if isinstance(batch, tuple) else np.asarray(batch)

    def __iter__(self) -> Iterator[Any]:
        return self._stream(self._steps)

    def __len__(self) -> int:
        count = self._length(self._steps)
        if count is None:
            raise TypeError("the dataset is infinite (repeat() without a count): it has no len()")
        return count

    def __getattr__(self, name: str) -> Any:
        if name in REFUSED:
            raise AttributeError(f"framework='keras' on Keras' {keras.backend.backend()} backend is a Keras data "
                                 f"adapter, not a tf.data.Dataset: .{name}() is not done here; {REFUSED[name]}")
        raise AttributeError(name)

    def _stream(self, steps: tuple[tuple[str, Any], ...]) -> Iterator[Any]:
        if not steps:
            return iter(self.iofeed_loader)
        *before, (step, value) = steps
        earlier = tuple(before)
        if step == "take":
            return itertools.islice(self._stream(earlier), value)
        if step == "skip":
            return itertools.islice(self._stream(earlier), value, None)
        if step == "map":
            return (_mapped(value, batch) for batch in self._stream(earlier))
        passes = itertools.count() if value is None else range(value)  # "repeat"
        return itertools.chain.from_iterable(self._stream(earlier) for _ in passes)

    def _length(self, steps: tuple[tuple[str, Any], ...]) -> int | None:
        """Batches the stream of `steps` holds (None: endless)."""
        if not steps:
            return int(len(self.iofeed_loader))
        *before, (step, asked) = steps
        value: int | None = asked
        count = self._length(tuple(before))
        if step in ("take", "skip"):
            assert value is not None  # take(n) and skip(n) are checked ints
            if step == "take":
                return value if count is None else min(value, count)
            return None if count is None else max(count - value, 0)
        if step == "repeat":
            return count if count == 0 else None if value is None or count is None else count * value
        return count  # map

    def get_numpy_iterator(self) -> Iterator[tuple[np.ndarray, np.ndarray]]:
        for images, labels in self:
            yield np.asarray(images), np.asarray(labels)

    def get_jax_iterator(self) -> Iterator[Any]:
        return iter(self)

    def get_torch_dataloader(self) -> Any:
        return self.iofeed_loader if not self._steps else _Iterable(self.__iter__)

    @property
    def num_batches(self) -> int | None:
        check_model_input(self.iofeed_loader)  # Keras asks for this first, from the model's fit/evaluate
        return self._length(self._steps)

    @property
    def batch_size(self) -> int:
        return int(self.iofeed_loader.order.batch_size)

    @property
    def has_partial_batch(self) -> bool:
        return self.partial_batch_size is not None

    @property
    def partial_batch_size(self) -> int | None:
        order = self.iofeed_loader.order
        if order.drop_last or any(step != "map" for step, _ in self._steps):
            return None
        return order.per_rank % order.batch_size or None


_BATCHES = "batches come batch_size at a time: pass batch_size= to iofeed.loader"
_SOURCES = "read several sources as one with iofeed.Mix({...})"
_PER_BATCH = "do per-batch work with .map() or batch_transform=, per-image work with transform="
# tf.data's other methods, each with what to do instead on the JAX and PyTorch backends
REFUSED = {
    "batch": _BATCHES, "unbatch": _BATCHES, "rebatch": _BATCHES, "padded_batch": _BATCHES,
    "shuffle": "the loader shuffles the train split each epoch itself (iofeed.loader(..., shuffle=..., seed=...))",
    "cache": "drop it: iofeed reads and augments every epoch anew (a cache would repeat the first epoch's crops)",
    "filter": _PER_BATCH, "flat_map": _PER_BATCH,
    "interleave": _SOURCES, "concatenate": _SOURCES, "zip": _SOURCES, "sample_from_datasets": _SOURCES,
    "shard": "the loader shares each epoch among ranks itself (Placement(rank=, world_size=), or the process group)",
    "with_options": "drop it: tf.data's options tune tf.data pipelines (iofeed's are iofeed.Resources(...))",
    "element_spec": "the batches are (images NHWC float32, labels): look at one with next(iter(data))",
    "cardinality": "len(data) is the number of batches",
}


def _count(step: str, count: Any) -> int:
    if isinstance(count, bool) or not isinstance(count, int) or count < (0 if step == "skip" else 1):
        raise OptionError(f"{step}(count) needs an int >= {0 if step == 'skip' else 1}, got {count!r}")
    return count


def _mapped(function: Callable[..., Any], batch: Any) -> Any:
    """`function` on a batch as tf.data calls it: a tuple's items as arguments."""
    return function(*batch) if isinstance(batch, tuple) else function(batch)


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

    adapter = JaxAdapter(options.output.dtype, options.placement.sharding, _affine(options), options.batch_transform)
    return adapter, lambda loader: KerasBatches(adapter.wrap(loader))  # wrap: the layout checked now


def _torch(options: LoaderOptions) -> tuple[Callable[[Batch], Any], Callable[[EpochLoader], Any]]:
    from .keras_torch import TorchBatches, training_device

    return TorchBatches(_affine(options), options.batch_transform, training_device()), KerasBatches


# Keras backend name -> (per-batch conversion, what `iofeed.loader` returns over the Loader)
BACKENDS: dict[str, Callable[[LoaderOptions], tuple[Callable[[Batch], Any], Callable[[EpochLoader], Any]]]] = {
    "tensorflow": _tensorflow, "jax": _jax, "torch": _torch,
}
