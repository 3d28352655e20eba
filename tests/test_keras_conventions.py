"""What a Keras 3 script meets on `framework="keras"`, on each backend (a process each: KERAS_BACKEND
is read when keras is first imported): float32 0-255 by default for a model that starts with
`Rescaling(1/255)`, a warning when the recipe normalises for such a model, every batch of the first
epoch trained, `take`/`skip`/`repeat`/`map` everywhere, tf.data's other methods refused naming the
alternative, and `batch_transform=` applied everywhere."""
from __future__ import annotations

import pytest

from helpers.keras_fit import run_on_backend

pytestmark = [pytest.mark.keras, pytest.mark.slow]  # a process importing its framework, a few short fits


@pytest.mark.parametrize("backend", [
    pytest.param("tensorflow", marks=pytest.mark.tf),
    pytest.param("jax", marks=pytest.mark.jax),
    pytest.param("torch", marks=pytest.mark.torch),
])
def test_keras_conventions_on_each_backend(colour_dataset, tmp_path, backend):
    got = run_on_backend("helpers.keras_conventions", colour_dataset, tmp_path / "conventions.json", backend)
    assert got["backend"] == backend
    low, high, dtype = got["pixels"]
    assert dtype == "float32" and 0 <= low and 128 < high <= 255, "the defaults: float32 0-255, for Rescaling(1/255)"
    per_epoch, warned = got["fit"]
    assert per_epoch == [got["len"]] * 2 == [8, 8], "every batch of every epoch (the first lost one on JAX/torch)"
    assert warned == [], "no 'ran out of data', and no scale warning with the defaults"
    assert len([w for w in got["normalised"] if "starts with Rescaling" in w]) == 1, "warned once, naming the layer"
    assert got["take"] == [3, 3] and got["repeat"] == [5, 5]
    assert got["take1"] == [[32, 32, 3], True], "take(1) iterates as in tf.data: the tutorial's first cell"
    assert got["map"] == [8], "a .map with a Keras preprocessing layer, prefetch(AUTOTUNE) after it"
    assert got["skip"] == [2, 8], "skip(6) of 8 batches; take(5).skip(1).repeat(2)"
    assert got["numpy"] == ["ndarray", "ndarray"]
    if backend == "tensorflow":
        assert got["shuffle"] == "works"
    else:
        assert got["shuffle"].count("\n") == 0 and "loader(..., shuffle=" in got["shuffle"], got["shuffle"]
    assert got["zeroed_max"] == 0.0, "batch_transform= applied"
    assert "batch transform ran and failed" in got["failing"]
