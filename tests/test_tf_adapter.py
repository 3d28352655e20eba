"""The TensorFlow adapter: a tf.data.Dataset with a fixed signature, float32 0-255 by default (as
Keras' `image_dataset_from_directory`) or normalised by the recipe, one loader epoch per iteration,
and Keras training on it."""
from __future__ import annotations

import os
import threading
import time
import warnings

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ.setdefault("KERAS_BACKEND", "tensorflow")

import numpy as np
import pytest

import iofeed
from helpers.images import label_from_pixels, png_bytes, smooth_rgb
from helpers.keras_fit import tiny_classifier

tf = pytest.importorskip("tensorflow")
pytestmark = pytest.mark.tf

SIZE = 32
MEAN = np.array([0.485, 0.456, 0.406])
STD = np.array([0.229, 0.224, 0.225])


def _dataset(source, **options):
    options = {"batch_size": 4, "image_size": SIZE, "workers": 1, "seed": 3, **options}
    return iofeed.loader(source, framework="tf", **options)


def _numpy_epochs(source, epochs, **options):
    """[(labels, float images on the 0-255 scale)] per batch of each epoch from the numpy loader."""
    options = {"batch_size": 4, "image_size": SIZE, "workers": 1, "seed": 3, **options}
    out = []
    with iofeed.loader(source, **options) as ld:
        for _ in range(epochs):
            out.append([(np.array(labels), np.array(images, np.float32)) for images, labels in ld])
    return out


def _pass(dataset):
    return [(labels.numpy(), images.numpy()) for images, labels in dataset]


def test_signature_shapes_and_dtypes(colour_dataset):
    dataset = _dataset(colour_dataset)
    try:
        images_spec, labels_spec = dataset.element_spec
        assert images_spec.shape.as_list() == [None, SIZE, SIZE, 3] and images_spec.dtype == tf.float32
        assert labels_spec.shape.as_list() == [None] and labels_spec.dtype == tf.int64
        loader = dataset.iofeed_loader
        assert isinstance(loader, iofeed.Loader)
        batches = 0
        for images, labels in dataset:
            assert images.shape == (4, SIZE, SIZE, 3) and images.dtype == tf.float32
            assert labels.shape == (4,) and labels.dtype == tf.int64
            pixels = images.numpy()
            assert pixels.min() >= 0 and pixels.max() > 1.5 and np.array_equal(pixels, np.rint(pixels)), \
                "Keras' convention: the stored pixels as float32 0-255"
            assert [label_from_pixels(image) for image in pixels] == labels.numpy().tolist()
            batches += 1
        assert batches == len(loader) == 8
    finally:
        dataset.iofeed_loader.close()


def test_values_equal_numpy_loader_and_epochs_differ(colour_dataset):
    expected = _numpy_epochs(colour_dataset, 2)
    dataset = _dataset(colour_dataset)
    with dataset.iofeed_loader as loader:
        got = [_pass(dataset), _pass(dataset)]
        assert loader.epoch == 2
    for epoch_got, epoch_expected in zip(got, expected, strict=True):
        for (labels, images), (labels_np, images_np) in zip(epoch_got, epoch_expected, strict=True):
            assert np.array_equal(labels, labels_np)
            np.testing.assert_allclose(images, images_np, atol=1e-4)
    first, second = ([labels.tolist() for labels, _ in epoch] for epoch in got)
    assert first != second, "each iteration runs the next epoch, in a new order"
    assert not np.allclose(got[0][0][1], got[1][0][1])


def test_abandoned_iteration_restarts_its_epoch(colour_dataset):
    expected = _numpy_epochs(colour_dataset, 2)
    dataset = _dataset(colour_dataset)
    with dataset.iofeed_loader as loader:
        peeked = _pass(dataset.take(1))
        full = [_pass(dataset), _pass(dataset)]
        assert loader.epoch == 2
    assert np.array_equal(peeked[0][0], expected[0][0][0])
    for epoch_got, epoch_expected in zip(full, expected, strict=True):
        assert [labels.tolist() for labels, _ in epoch_got] == [labels.tolist() for labels, _ in epoch_expected]


@pytest.mark.slow
def test_a_new_iterator_waits_for_the_old_ones_thread(tmp_path):
    """An older iterator kept alive keeps its prefetch thread asking the Loader for batches: the
    newer one must not read the workers' pipes at the same time (it hung there, both threads
    waiting for the one reply)."""
    for c in range(2):  # large PNGs: each batch takes long enough that the old thread waits in the engine
        (tmp_path / f"00{c}.class{c}").mkdir()
        for i in range(4):
            (tmp_path / f"00{c}.class{c}" / f"{i}.png").write_bytes(png_bytes(smooth_rgb(1400, 1400, seed=10 * c + i)))
    options = {"batch_size": 2, "resources": iofeed.Resources(prefetch=1)}
    # the first two batches of each epoch (an older iterator's thread may finish an epoch first:
    # then the newer one starts the next, from its beginning)
    starts = [[images for _, images in epoch[:2]] for epoch in _numpy_epochs(tmp_path, 4, **options)]
    dataset = _dataset(tmp_path, **options)
    results: list[bool] = []

    def trials() -> None:
        for _ in range(3):
            older = iter(dataset)
            next(older)
            time.sleep(0.05)  # its prefetch thread now waits for the next batch
            newer = iter(dataset)  # takes over: an epoch from its first batch
            got = [next(newer)[0].numpy() for _ in range(2)]
            results.append(any(all(np.allclose(g, e, atol=1e-4) for g, e in zip(got, start)) for start in starts))
            del older, newer

    with dataset.iofeed_loader:
        runner = threading.Thread(target=trials, daemon=True)
        runner.start()
        runner.join(timeout=300)
        assert not runner.is_alive(), f"hung after {len(results)} iterator pairs"
    assert results == [True] * 3


def test_val_split_in_file_order(colour_dataset):
    dataset = _dataset(colour_dataset, split="val", batch_size=3)
    with dataset.iofeed_loader:
        labels = np.concatenate([labels for labels, _ in _pass(dataset)])
    assert labels.tolist() == [0, 0, 1, 1, 2, 2, 3, 3]


# Keras warns at the end of the first epoch over any dataset of unknown length (from_generator)
@pytest.mark.filterwarnings("ignore:Your input ran out of data")
def test_keras_fit_two_epochs(colour_dataset):
    keras = pytest.importorskip("keras")
    keras.utils.set_random_seed(0)
    dataset = _dataset(colour_dataset, seed=11)
    with dataset.iofeed_loader as loader:
        model = tiny_classifier(SIZE)
        validation = _dataset(colour_dataset, split="val", batch_size=3)
        with validation.iofeed_loader as val_loader, warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            history = model.fit(dataset, epochs=2, shuffle=False, verbose=0,  # the loader shuffles
                                validation_data=validation)
            # the number of batches is declared: Keras used to warn "Your input ran out of data" at every fit
            assert int(dataset.cardinality()) == len(dataset) == len(loader) == 8
            assert not [w for w in caught if "ran out of data" in str(w.message)], [str(w.message) for w in caught]
            assert val_loader.epoch == 2 and val_loader.stats.images == 2 * 8, "all of val, each epoch"
        # Keras opens (and abandons) an iterator for a third epoch: it restarts epoch 2 if used
        assert loader.epoch == 2, "each Keras epoch ran one loader epoch"
        assert loader.stats.images == 2 * 32
    for key in ("loss", "val_loss"):
        assert len(history.history[key]) == 2 and all(np.isfinite(history.history[key])), key


def test_a_dropped_dataset_frees_its_workers(colour_dataset):
    import gc

    import psutil

    dataset = _dataset(colour_dataset)
    assert len(_pass(dataset)) == 8
    workers = [p.pid for p in dataset.iofeed_loader.engine.processes()]
    assert workers
    del dataset
    gc.collect()
    deadline = time.monotonic() + 10
    while any(psutil.pid_exists(p) and psutil.Process(p).status() != psutil.STATUS_ZOMBIE for p in workers):
        assert time.monotonic() < deadline, "the workers of a dropped dataset are still running"
        time.sleep(0.1)


def test_closing_under_a_live_iterator_stops_it_cleanly_with_one_line(colour_dataset, capfd):
    """issue 22.13: it raised UnknownError carrying 3 Python tracebacks, each logged by TF as well."""
    dataset = _dataset(colour_dataset)
    iterator = iter(dataset)
    next(iterator)
    with pytest.warns(UserWarning, match="this loader was closed.*the tf dataset stops here"):
        dataset.iofeed_loader.close()
        time.sleep(0.5)  # TF's prefetch thread asks the closed loader for more
        rest = list(iterator)  # the prefetched batches, then the end
        assert list(iter(dataset)) == [], "an iteration started after close() ends at once"
    assert len(rest) <= 2
    err = capfd.readouterr().err
    assert "Traceback" not in err and "UnknownError" not in err and "TypeError" not in err


@pytest.mark.torch
def test_tensorflow_and_torch_share_a_process(colour_dataset):
    with iofeed.loader(colour_dataset, batch_size=4, image_size=SIZE, workers=1, seed=3, framework="torch") as ld:
        torch_images, _ = next(iter(ld))
    dataset = _dataset(colour_dataset, augment=iofeed.Recipe(mean=MEAN, std=STD))  # torch's default, asked for
    with dataset.iofeed_loader:
        tf_images, _ = next(iter(dataset))
    np.testing.assert_allclose(torch_images.permute(0, 2, 3, 1).numpy(), tf_images.numpy(), atol=1e-4)


def test_epoch_boundary_script_measures_both_inputs(colour_dataset):
    """scripts/epoch_boundary.py (docs/benchmarks.md) runs as a plain script: each new iterator of
    the tf dataset (a Keras epoch) begins on batches the workers started during the previous one."""
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    out = subprocess.run(
        [sys.executable, str(root / "scripts" / "epoch_boundary.py"), str(colour_dataset), "--split", "train",
         "--epochs", "3", "--batch-size", "4", "--image-size", str(SIZE)],
        capture_output=True, text=True, timeout=300,
        env={**os.environ, "PYTHONPATH": os.pathsep.join([str(root / "src"), os.environ.get("PYTHONPATH", "")])},
    )
    assert out.returncode == 0, out.stderr[-3000:]
    lines = out.stdout.splitlines()
    assert sum(line.count(" s; inside epochs median") for line in lines) == 2, out.stdout
    started = next(line for line in lines if "batches started in the previous epoch" in line)
    assert int(started.rsplit(":", 1)[1]) > 0, out.stdout


def test_multi_hot_labels_as_float_vectors(colour_dataset):
    dataset = iofeed.loader(str(colour_dataset), batch_size=4, image_size=32, workers=1, framework="tf",
                            output=iofeed.Output(target="multi_hot"))
    try:
        assert dataset.element_spec[1].shape.as_list() == [None, 4]
        images, labels = next(iter(dataset))
        assert labels.dtype == tf.float32 and labels.shape == (4, 4)
        assert np.array_equal(labels.numpy().sum(1), np.ones(4)), "one-hot rows of a one-class dataset"
        with iofeed.loader(str(colour_dataset), batch_size=4, image_size=32, workers=1) as plain:
            _, first = next(iter(plain))
            assert np.array_equal(labels.numpy().argmax(1), first), "the same batch as class indices"
    finally:
        dataset.iofeed_loader.close()
def test_batches_reuse_a_few_aligned_arrays(colour_dataset):
    """Batches reach TF without a copy (64-byte aligned host arrays) and their memory is reused once
    TF lets go, instead of fresh arrays (page faults) every batch."""
    from iofeed.adapters.output_pool import ALIGN, KEEP

    dataset = _dataset(colour_dataset)
    with dataset.iofeed_loader as loader:
        normaliser = loader._adapter._normalise
        batches = 0
        for _ in dataset.repeat(3):
            batches += 1
        assert batches == 3 * len(loader)
        assert 0 < normaliser.pool.made <= KEEP, "memory TF let go of was reused"
        assert all(normaliser(np.zeros((4, SIZE, SIZE, 3), np.uint8)).ctypes.data % ALIGN == 0 for _ in range(3))


def test_autotuning_is_off_so_new_iterators_start_sooner(colour_dataset):
    dataset = _dataset(colour_dataset)
    with dataset.iofeed_loader:
        assert dataset.options().autotune.enabled is False
        assert dataset.map(lambda images, labels: (images, labels)).options().autotune.enabled is False
