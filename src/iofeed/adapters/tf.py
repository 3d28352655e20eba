"""TensorFlow adapter: a `tf.data.Dataset` wrapped around a numpy Loader, normalised with TF ops."""
from __future__ import annotations

import threading
import weakref
from typing import Any

import numpy as np
import tensorflow as tf

from ..backends.base import Batch
from ..options import LoaderOptions
from .base import EpochLoader
from .normalize import uint8_affine
from .numpy import to_numpy


class TfAdapter:
    """The tf framework: numpy batches from the engine, and `iofeed.loader` returns
    `to_tf_dataset(loader)`, an explicit wrapper over the Loader."""

    @classmethod
    def from_options(cls, options: LoaderOptions) -> TfAdapter:
        """The adapter for `options` (it has nothing to set up)."""
        return cls()

    def __call__(self, batch: Batch) -> tuple[np.ndarray, np.ndarray]:
        return to_numpy(batch)

    def wrap(self, loader: EpochLoader) -> tf.data.Dataset:
        """The dataset over `loader`."""
        return to_tf_dataset(loader)


def to_tf_dataset(loader: EpochLoader) -> tf.data.Dataset:
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
                        images, labels = next(batches)
                    except StopIteration:
                        state["active"] = None
                        return
                    images, labels = np.array(images, copy=True, order="C"), np.array(labels, label_dtype, copy=True)
                yield images, labels
        finally:
            batches.close()

    multi_hot = loader.options.target == "multi_hot"  # float32 (batch, classes) labels
    label_dtype = np.float32 if multi_hot else np.int64
    signature = (
        tf.TensorSpec(shape=(None, size, size, 3), dtype=tf.uint8),
        tf.TensorSpec(shape=(None, len(loader.source.classes)) if multi_hot else (None,),
                      dtype=tf.float32 if multi_hot else tf.int64),
    )
    scale, shift = (tf.constant(values, tf.float32) for values in uint8_affine())

    def normalise(images: Any, labels: Any) -> tuple[Any, Any]:
        # per-channel affine in NHWC order: x * scale + shift == (x / 255 - mean) / std
        return tf.cast(images, tf.float32) * scale + shift, labels

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
