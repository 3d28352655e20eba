"""TensorFlow adapter: a `tf.data.Dataset` wrapped around a numpy Loader, normalised with TF ops."""
from __future__ import annotations

import threading
import weakref
from typing import Any

import numpy as np
import tensorflow as tf

from ..backends.base import Batch
from ..options import LoaderOptions
from ..transforms import batch_seed, takes
from .base import EpochLoader
from .normalize import IMAGENET_AFFINE, Affine, options_affine
from .numpy import to_numpy


class TfAdapter:
    """The tf framework: numpy batches from the engine, and `iofeed.loader` returns
    `to_tf_dataset(loader, ...)`, an explicit wrapper over the Loader, normalised with the
    recipe's mean/std and followed by the `batch_transform` if any."""

    def __init__(self, affine: Affine | None = IMAGENET_AFFINE, batch_transform: Any = None,
                 sample: tuple[tuple[int, ...], Any] | None = None) -> None:
        self.affine, self.batch_transform, self.sample = affine, batch_transform, sample

    @classmethod
    def from_options(cls, options: LoaderOptions) -> TfAdapter:
        """The adapter for `options`: normalisation, batch transform, a sample transform's output."""
        output = options.transform_output
        return cls(options_affine(options), options.batch_transform,
                   None if output is None else (output.shape, tf.as_dtype(output.dtype)))

    def __call__(self, batch: Batch) -> tuple[np.ndarray, ...]:
        if self.batch_transform is None:
            return to_numpy(batch)
        return (*to_numpy(batch), batch_seed(batch.key))  # the batch transform's seed rides along

    def wrap(self, loader: EpochLoader) -> tf.data.Dataset:
        """The dataset over `loader`."""
        return to_tf_dataset(loader, self.affine, self.batch_transform, self.sample)


def to_tf_dataset(loader: EpochLoader, affine: Affine | None = IMAGENET_AFFINE, batch_transform: Any = None,
                  sample: tuple[tuple[int, ...], Any] | None = None) -> tf.data.Dataset:
    """A `tf.data.Dataset` of (images float32 NHWC (None, S, S, 3), labels int64 (None,)), or
    float32 (None, classes) labels for `target="multi_hot"`.

    `loader` is a numpy-framework Loader. Each batch is copied out of shared memory (the view
    is reused at the next batch) into `from_generator`; a `.map` converts and normalises it
    with ImageNet mean/std using TF ops, then `.prefetch(tf.data.AUTOTUNE)`. (tf.data runs
    its `.map` on the host CPU; the uint8 → float32 conversion happens there.)

    Every new iteration of the dataset (each Keras epoch, each `for` loop) runs the loader's
    next epoch: the Loader advances its epoch after each full pass. An iteration abandoned
    before its end (`take`, `break`, a distribution strategy peeking at one batch) cannot be
    resumed exactly, because prefetching has pulled batches the consumer never saw: the next
    iteration restarts that epoch from its first batch. A Loader already positioned mid-epoch
    (`load_state_dict`) before the dataset is made is resumed from there by the first
    iteration. Iterate one iterator at a time: starting a new one ends the previous one (it waits
    until the previous one's thread has left the Loader, at most one batch).

    The Loader is kept as `dataset.iofeed_loader` (for `set_epoch`, `state_dict`, `stats`);
    datasets derived with further transformations do not carry that attribute, so keep the
    returned object. Close it when done with `dataset.iofeed_loader.close()`; otherwise its
    workers and memory are released once the dataset, the datasets derived from it and their
    iterators are all gone (TensorFlow keeps the generator function for the life of the process,
    so that function refers to the Loader only weakly). An iterator still running when the Loader
    is closed stops there: asking it for more raises the Loader's one-line error.

    `affine` None keeps uint8 images; float32 images (a sample transform's output, of shape and
    dtype `sample`) are not normalised. `batch_transform(images, labels)` runs inside the `.map`
    after normalisation, given `seed=` (an int64 pair per batch, for stateless random ops) when it
    takes one.
    """
    size = loader.image_size
    state: dict[str, Any] = {"active": None}  # the token of the iteration now running
    turn = threading.Lock()  # one thread at a time in the Loader: each iterator runs on its own threads
    loader_ref = weakref.ref(loader)

    def generate() -> Any:
        loader = loader_ref()  # alive: the dataset (kept by its iterators) holds it
        token = object()
        with turn:  # an older iterator's thread may be inside the Loader: wait until it is out
            if state["active"] is not None:  # the previous iteration did not reach its end
                loader.set_epoch(loader.epoch)
            state["active"] = token
            batches = iter(loader)
        try:
            while True:
                with turn:
                    if state["active"] is not token:  # a newer iteration ends this one
                        return
                    try:
                        images, labels, *seed = next(batches)
                    except StopIteration:
                        state["active"] = None
                        return
                    images, labels = np.array(images, copy=True, order="C"), np.array(labels, label_dtype, copy=True)
                yield images, labels, *seed
        finally:
            batches.close()

    multi_hot = loader.options.target == "multi_hot"  # float32 (batch, classes) labels
    label_dtype = np.float32 if multi_hot else np.int64
    shape, dtype = sample or ((size, size, 3), tf.uint8)
    signature = (
        tf.TensorSpec(shape=(None, *shape), dtype=dtype),
        tf.TensorSpec(shape=(None, len(loader.source.classes)) if multi_hot else (None,),
                      dtype=tf.float32 if multi_hot else tf.int64),
    ) + ((tf.TensorSpec(shape=(2,), dtype=tf.int64),) if batch_transform is not None else ())
    scale, shift = (tf.constant(values, tf.float32) for values in (affine or IMAGENET_AFFINE))
    seeded = batch_transform is not None and takes(batch_transform, "seed")

    def normalise(images: Any, labels: Any, *seed: Any) -> tuple[Any, Any]:
        # per-channel affine in NHWC order: x * scale + shift == (x / 255 - mean) / std
        if affine is not None and dtype == tf.uint8:
            images = tf.cast(images, tf.float32) * scale + shift
        if batch_transform is None:
            return images, labels
        return batch_transform(images, labels, seed=seed[0]) if seeded else batch_transform(images, labels)

    dataset = (
        tf.data.Dataset.from_generator(generate, output_signature=signature)
        .map(normalise, num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)
        .prefetch(tf.data.AUTOTUNE)
    )
    dataset.iofeed_loader = loader
    # Keras reads `cardinality()` to know an epoch's steps (unknown: "Your input ran out of data" at every
    # fit). Declared, not asserted: a pass with fully skipped batches, or resumed mid-epoch, is shorter.
    dataset.cardinality = lambda: tf.constant(len(loader), tf.int64)
    return dataset
