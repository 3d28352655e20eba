"""TensorFlow adapter: a `tf.data.Dataset` wrapped around a Loader, its batches normalised on the host
with numpy, GPU or not: a `tf.data` map runs on the CPU whatever device it is placed on."""
from __future__ import annotations

import threading
import warnings
import weakref
from typing import Any

import numpy as np
import tensorflow as tf

from ..augment.transform_checks import BATCH_RESULT_FIX, batch_result_problem
from ..augment.transforms import batch_seed, takes, transform_name
from ..engines.base import Batch
from ..errors import LoaderStateError, OptionError
from ..options.loader_options import LoaderOptions
from .base import EpochLoader
from .host_float import HostNormaliser
from .normalised_twice import check_model_input
from .normalize import HOST, Affine, options_affine, record_normalise_on
from .numpy import to_numpy
from .tf_boxes import box_signature


class TfAdapter:
    """The tf framework: `iofeed.loader` returns `to_tf_dataset(loader, ...)`, an explicit wrapper
    over the Loader followed by the `batch_transform` if any. Batches are normalised (the recipe's
    mean/std) on the host ("host"), with numpy into a float32 array TensorFlow takes without
    copying, with a GPU too: `tf.data` has only CPU kernels for a `.map`'s function, so the
    "device path" that normalised after `copy_to_device("/gpu:0")` copied each batch back to the
    host, normalised it there and said "/gpu:0" (docs/decisions/0084-tf-normalises-on-the-host-with-a-gpu-too.md)."""

    def __init__(self, affine: Affine | None, batch_transform: Any = None) -> None:
        self._affine = affine
        self.batch_transform = batch_transform
        self.affine: Affine | None = None
        self.normalise_on: str | None = None
        self.sample: tuple[tuple[int, ...], Any] | None = None
        self._normalise: HostNormaliser | None = None

    def _decide(self, sample: tuple[tuple[int, ...], Any] | None) -> None:
        """Whether batches are normalised, once what the engine's sample transform returns is known
        (`sample`: its shape and dtype): a transform's floats pass as they are."""
        floats = sample is not None and sample[1] != tf.uint8
        self.affine = None if floats else self._affine
        self.normalise_on = None if self.affine is None else HOST
        self._normalise = None if self.affine is None else HostNormaliser(np.float32, self.affine)  # on the HOST
        self.sample = sample

    @classmethod
    def from_options(cls, options: LoaderOptions) -> TfAdapter:
        """The adapter for `options`: normalisation and batch transform."""
        return cls(options_affine(options), options.batch_transform)

    def __call__(self, batch: Batch) -> tuple[np.ndarray, ...]:
        images, labels = to_numpy(batch)
        if self._normalise is not None and images.dtype == np.uint8:
            images = self._normalise(images)
        else:  # uint8 (normalize=False), or a transform's floats: out of the slot
            images = np.array(images, copy=True, order="C")
        batch.release()  # copied: the engine may reuse its memory
        labels = np.array(labels, np.float32 if labels.dtype.kind == "f" else np.int64)  # a copy: the slot is reused
        if self.batch_transform is None:
            return images, labels
        return images, labels, batch_seed(batch.key)  # the batch transform's seed rides along

    def wrap(self, loader: EpochLoader) -> tf.data.Dataset[Any]:
        """The dataset over `loader`, its element spec from what the engine's sample transform returns;
        `stats.settings["normalise_on"]` says where it normalises."""
        output = loader.engine.sample_output
        self._decide(None if output is None else (output.shape, tf.as_dtype(output.dtype)))
        record_normalise_on(loader, self.normalise_on)
        return to_tf_dataset(loader, self.normalise_on, self.batch_transform, self.sample)


PREFETCH = 2  # batches TensorFlow holds ready: the workers' own slots are the deeper buffer


def checked_tf_batch(fn: Any, out: Any, images: Any, problems: list[str]) -> tuple[Any, Any]:
    """A tf batch transform's result, checked: its form when traced (the error is kept in
    `problems`: tf rewraps what a traced function raises, the caller raises it in one line), its
    lengths on every batch (an InvalidArgumentError naming the transform)."""
    problem = batch_result_problem(out, None)
    name = f"batch_transform={transform_name(fn)}"
    if problem:
        problems.append(f"{name} returned {problem}")
        raise OptionError(problems[-1])
    rows = tf.shape(images)[0]
    message = f"{name} returned images or labels of another length than the batch: {BATCH_RESULT_FIX}"
    with tf.control_dependencies([tf.debugging.assert_equal(tf.shape(part)[0], rows, message=message)
                                  for part in out]):
        return tf.identity(out[0]), tf.identity(out[1])


def to_tf_dataset(loader: EpochLoader, normalise_on: str | None = HOST, batch_transform: Any = None,
                  sample: tuple[tuple[int, ...], Any] | None = None) -> tf.data.Dataset[Any]:
    """A `tf.data.Dataset` of (images float32 NHWC (None, S, S, 3), labels int64 (None,)), or
    float32 (None, classes) labels for `Output(target="multi_hot")`, a dict of ragged boxes and labels
    for "boxes" / "masks" (`tf_boxes.py`); uint8 images when `normalise_on` is
    None, and a sample transform's output (of shape and dtype `sample`) as it is.

    `loader` is a Loader whose adapter is `TfAdapter`. With `normalise_on="host"` each batch comes
    out of shared memory already normalised by numpy on one thread, into a 64-byte
    aligned array that `from_generator` hands to TensorFlow without a copy. (On the CPU,
    normalising with TF ops in a `.map` costs a copy out of the slot, another into TF, and TF's
    thread pool on the workers' cores; measured:
    docs/decisions/0064-tf-normalises-on-the-host-before-tensorflow.md.) `.prefetch(2)` overlaps it
    with the training step.
    tf.data's autotuning is off (nothing to tune, and its start-up slowed each new iterator),
    which datasets derived from this one inherit.

    Every new iteration of the dataset (each Keras epoch, each `for` loop) runs the loader's
    next epoch: the Loader advances its epoch after each full pass. An iteration abandoned
    before its end (`take`, `break`, a distribution strategy peeking at one batch) cannot be
    resumed exactly, because prefetching has pulled batches the consumer never saw: the next
    iteration begins that pass again (the Loader's rule for every `iter()`). A Loader positioned
    mid-epoch by `load_state_dict` is resumed from there, also after a peeked-at iteration.
    Iterate one iterator at a time: starting a new one ends the previous one (it waits until the
    previous one's thread has left the Loader, at most one batch).

    The Loader is kept as `dataset.iofeed_loader` (for `set_epoch`, `state_dict`, `stats`);
    datasets derived with further transformations do not carry that attribute, so keep the
    returned object. Close it when done with `dataset.iofeed_loader.close()`; otherwise its
    workers and memory are released once the dataset, the datasets derived from it and their
    iterators are all gone (TensorFlow keeps the generator function for the life of the process,
    so that function refers to the Loader only weakly). An iterator still running when the Loader
    is closed, or one started after, stops cleanly there (the end of its sequence) with the
    Loader's one-line error as a `UserWarning`: an exception raised inside `from_generator` reaches
    the caller as an `UnknownError` carrying Python tracebacks, and TensorFlow logs each of them.

    `batch_transform(images, labels)` runs in a `.map` after normalisation, given `seed=` (an
    int64 pair per batch, for stateless random ops) when it takes one. The dataset declares
    `len(loader)` batches (`cardinality()`, `len()`), so Keras knows an epoch's steps.
    """
    size = loader.image_size
    state: dict[str, Any] = {"active": None}  # the token of the iteration now running
    turn = threading.Lock()  # one thread at a time in the Loader: each iterator runs on its own threads
    loader_ref = weakref.ref(loader)

    def generate() -> Any:
        loader = loader_ref()
        assert loader is not None, "the dataset (kept by its iterators) holds it"
        token = object()
        with turn:  # an older iterator's thread may be inside the Loader: wait until it is out
            state["active"] = token  # a pass the previous one left is begun again by the Loader itself
            batches = iter(loader)
        try:
            while True:
                with turn:
                    if state["active"] is not token:  # a newer iteration ends this one
                        return
                    try:
                        out = next(batches)
                    except StopIteration:
                        state["active"] = None
                        return
                    except LoaderStateError as exc:  # closed: one clear line instead of TF's tracebacks
                        warnings.warn(f"{exc}; the tf dataset stops here", stacklevel=1)
                        return
                yield out
        finally:
            batches.close()

    multi_hot = loader.options.output.target == "multi_hot"  # float32 (batch, classes) labels
    shape, dtype = sample or ((size, size, 3), tf.uint8)
    dtype = tf.float32 if dtype == tf.uint8 and normalise_on == HOST else dtype  # a transform's floats as they are
    labels: Any = tf.TensorSpec(shape=(None, len(loader.source.classes)) if multi_hot else (None,),
                                dtype=tf.float32 if multi_hot else tf.int64)
    options = loader.options
    if options.moves_targets:  # a dict of ragged boxes and labels (`tf_boxes.py`)
        labels = box_signature((int(shape[0]), int(shape[1])), options.output.target == "masks",
                               options.augmentation.letterbox and options.transform is None)
    signature = (tf.TensorSpec(shape=(None, *shape), dtype=dtype), labels,
                 ) + ((tf.TensorSpec(shape=(2,), dtype=tf.int64),) if batch_transform is not None else ())
    tuning = tf.data.Options()
    tuning.autotune.enabled = False  # nothing here to tune; its per-iterator start-up doubled Keras' epoch stall
    dataset = tf.data.Dataset.from_generator(generate, output_signature=signature)
    if batch_transform is not None:
        dataset = _with_batch_transform(dataset, batch_transform)
    dataset = dataset.prefetch(PREFETCH).with_options(tuning)
    dataset.iofeed_loader = loader  # type: ignore[attr-defined]  # the Loader rides on the dataset (documented)
    # Keras reads `cardinality()` to know an epoch's steps (unknown: "Your input ran out of data" at every
    # fit). Declared, not asserted: a pass with fully skipped batches, or resumed mid-epoch, is shorter.
    dataset.cardinality = lambda: _cardinality(loader)  # type: ignore[method-assign]  # declared: see above
    return dataset


def _with_batch_transform(dataset: tf.data.Dataset[Any], batch_transform: Any) -> tf.data.Dataset[Any]:
    """`dataset.map` of the user's `batch_transform` (given `seed=` when it takes one), checked when
    traced: a wrong form raises one OptionError line."""
    seeded = takes(batch_transform, "seed")
    problems: list[str] = []

    def transform(images: Any, labels: Any, seed: Any) -> tuple[Any, Any]:
        out = batch_transform(images, labels, seed=seed) if seeded else batch_transform(images, labels)
        return checked_tf_batch(batch_transform, out, images, problems)

    try:
        return dataset.map(transform)  # one call at a time: in batch order
    except Exception:
        if problems:
            raise OptionError(problems[0]) from None
        raise


def _cardinality(loader: EpochLoader) -> Any:
    """`len(loader)` as TF's cardinality; Keras asks for it from the model's fit, where a model that
    rescales its own input can be seen (`check_model_input`)."""
    check_model_input(loader)
    return tf.constant(len(loader), tf.int64)
