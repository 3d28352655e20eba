"""Keras 3 `model.fit(iofeed.loader(..., framework="keras"))` on the TensorFlow, JAX and PyTorch
backends, each in a process of its own (KERAS_BACKEND is read when keras is first imported)."""
from __future__ import annotations

import numpy as np
import pytest

from helpers.keras_fit import SIZE, run_on_backend

pytestmark = [pytest.mark.keras, pytest.mark.slow]  # ~10 s each: a process importing its framework


@pytest.mark.parametrize(("backend", "returned"), [
    pytest.param("tensorflow", "Dataset", marks=pytest.mark.tf),  # a tf.data dataset class
    pytest.param("jax", "KerasBatches", marks=pytest.mark.jax),
    pytest.param("torch", "KerasBatches", marks=pytest.mark.torch),
])
def test_keras_fit_on_each_backend(colour_dataset, tmp_path, backend, returned):
    result = run_on_backend("helpers.keras_fit", colour_dataset, tmp_path / "fit.json", backend)
    assert result["backend"] == backend and result["type"].endswith(returned)
    # Keras on JAX/torch takes a batch from an iterator it then drops: that pass is begun again
    peeked = 0 if backend == "tensorflow" else 4
    assert result["epoch"] == 2 and result["images"] == 2 * 32 + peeked, "each fit epoch is one loader epoch"
    assert result["val_epoch"] == 2 and result["val_images"] == 2 * 8, "all of val after each epoch"
    for key in ("loss", "val_loss"):
        values = result["history"][key]
        assert len(values) == 2 and all(np.isfinite(values)), (key, values)


def test_augment_uint8_gives_the_same_float32_pixels_on_every_backend(colour_dataset, tmp_path):
    """augment="uint8" (a recipe that does not normalise) gave uint8 on Keras' JAX backend but
    float32 0-255 on TensorFlow and PyTorch, so a model written on one broke on another. Every
    backend now follows Keras' `image_dataset_from_directory`: float32 0-255, the stored pixels."""
    pytest.importorskip("tensorflow"), pytest.importorskip("jax"), pytest.importorskip("torch")
    import iofeed

    with iofeed.loader(colour_dataset, split="val", batch_size=4, image_size=SIZE, workers=1, framework="numpy",
                       augment="uint8") as loader:
        batches = [(images, labels) for images, labels in loader]
    assert batches and all(images.dtype == np.uint8 for images, _ in batches)
    stored = [(images.tolist(), labels.tolist()) for images, labels in batches]
    results = {backend: run_on_backend("helpers.keras_pixels", colour_dataset, tmp_path / f"{backend}.json", backend)
               for backend in ("tensorflow", "jax", "torch")}
    assert {b: r["dtypes"] for b, r in results.items()} == {b: ["float32"] for b in results}
    for backend, result in results.items():
        got = list(zip(result["pixels"], result["labels"]))
        assert got == stored, f"{backend}: the val pixels (0-255) and labels as stored, in order"
