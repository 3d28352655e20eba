"""Where batches are normalised with a GPU (issue 30 §2, issue 37). Keras on PyTorch and the JAX
adapter hand uint8 over the bus and normalise on the device; tf and Keras on TensorFlow normalise on
the host and say so: a `tf.data` map has only CPU kernels, so the map that was placed on the GPU
after `copy_to_device` ran on the host after a round trip while `normalise_on` said "/gpu:0". The
device path is the same code on the CPU where one exists: the device decision (`training_device`),
forced here onto the CPU, stands in for the GPU this machine lacks. Pixels encode labels
(helpers/images.py), so a mix-up shows."""
from __future__ import annotations

import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ.setdefault("KERAS_BACKEND", "tensorflow")  # Keras on TensorFlow in this process

import numpy as np
import pytest

import iofeed
from helpers.images import label_from_pixels
from helpers.keras_fit import run_on_backend

SIZE = 32
MEAN = (0.485, 0.456, 0.406)
STD = (0.229, 0.224, 0.225)
RECIPE = iofeed.Recipe(mean=MEAN, std=STD)


def pixels_of(normalised: np.ndarray) -> np.ndarray:
    """0-255 pixels back from images normalised with MEAN/STD."""
    return (normalised * np.array(STD) + np.array(MEAN)) * 255.0


@pytest.fixture
def tf_sees_a_gpu(monkeypatch):
    """TensorFlow as it is with one GPU visible (what the tf adapter asked before deciding)."""
    import tensorflow as tf

    visible = tf.config.get_visible_devices
    gpu = tf.config.PhysicalDevice("/physical_device:GPU:0", "GPU")
    monkeypatch.setattr(tf.config, "get_visible_devices",
                        lambda device_type=None: [gpu] if device_type == "GPU" else visible(device_type))


def _tf_epochs(source, epochs, **options):
    """[[(labels, images) per batch] per epoch] of `framework="tf"`, and the loader's settings."""
    options = {"batch_size": 4, "image_size": SIZE, "workers": 1, "seed": 3, "framework": "tf", **options}
    dataset = iofeed.loader(source, **options)
    with dataset.iofeed_loader as loader:
        got = [[(labels.numpy(), images.numpy()) for images, labels in dataset] for _ in range(epochs)]
        return got, loader.stats.settings, dataset


@pytest.mark.tf
def test_tf_with_a_gpu_normalises_on_the_host_and_says_so(colour_dataset, tf_sees_a_gpu):
    """No `.map` claims the GPU: the generator hands TensorFlow the batch numpy normalised, and
    `normalise_on` says "host", which `iofeed doctor` reads."""
    dataset = iofeed.loader(colour_dataset, batch_size=4, image_size=SIZE, workers=1, framework="tf", augment=RECIPE)
    with dataset.iofeed_loader as loader:
        assert loader.stats.settings["normalise_on"] == "host"
        images, labels = next(iter(dataset))
        batches = iter(loader)  # what the generator hands TensorFlow: the adapter's output
        passed, _ = next(batches)
        batches.close()
    assert passed.dtype == np.float32 and passed.shape == (4, SIZE, SIZE, 3), "normalised before TensorFlow"
    assert images.dtype.name == "float32" and images.shape == (4, SIZE, SIZE, 3)
    assert "CPU" in images.device, images.device
    assert [label_from_pixels(pixels_of(image)) for image in images.numpy()] == labels.numpy().tolist()


@pytest.mark.tf
def test_tf_with_a_gpu_gives_the_same_batches_as_without(colour_dataset, tf_sees_a_gpu):
    """One path, whatever TensorFlow sees: the same pixels and labels, batch for batch, two epochs."""
    got, settings, dataset = _tf_epochs(colour_dataset, 2, augment=RECIPE)
    with pytest.MonkeyPatch.context() as cpu_only:
        import tensorflow as tf

        cpu_only.setattr(tf.config, "get_visible_devices", lambda device_type=None: [])
        expected, host_settings, _ = _tf_epochs(colour_dataset, 2, augment=RECIPE)
    assert settings["normalise_on"] == host_settings["normalise_on"] == "host"
    images_spec, labels_spec = dataset.element_spec
    assert images_spec.dtype.name == "float32" and images_spec.shape.as_list() == [None, SIZE, SIZE, 3]
    assert [len(epoch) for epoch in got] == [len(epoch) for epoch in expected] == [8, 8]
    for epoch_got, epoch_expected in zip(got, expected, strict=True):
        for (labels, images), (host_labels, host_images) in zip(epoch_got, epoch_expected, strict=True):
            assert np.array_equal(labels, host_labels) and np.array_equal(images, host_images)
    assert [labels.tolist() for labels, _ in got[0]] != [labels.tolist() for labels, _ in got[1]], "a new epoch"


@pytest.mark.tf
def test_tf_sample_transform_floats_pass_as_they_are(colour_dataset, tf_sees_a_gpu):
    """A sample transform's float32 output (0-255, half the side) is the user's scale: not normalised
    again, and its shape is the dataset's."""
    from helpers.transforms import downscale

    got, settings, dataset = _tf_epochs(colour_dataset, 1, augment=RECIPE, transform=downscale)
    assert settings["normalise_on"] is None and dataset.element_spec[0].shape.as_list() == [None, 16, 16, 3]
    assert len(got[0]) == 8
    for labels, images in got[0]:
        assert images.dtype == np.float32 and images.shape == (4, SIZE // 2, SIZE // 2, 3) and images.max() > 50
        assert [label_from_pixels(image) for image in images] == labels.tolist(), "0-255 floats, as returned"


@pytest.mark.keras
@pytest.mark.slow  # a process importing Keras and its backend
@pytest.mark.parametrize("backend", [pytest.param("torch", marks=pytest.mark.torch),
                                     pytest.param("jax", marks=pytest.mark.jax)])
def test_keras_sample_transform_floats_pass_as_they_are(colour_dataset, tmp_path, backend):
    """Keras on torch (host and device paths) and on JAX normalised a transform's 0-255 floats again
    with the recipe's mean/std (values around -2..2, pixels no longer saying the label)."""
    got = run_on_backend("helpers.keras_floats", colour_dataset, tmp_path / "floats.json", backend)
    assert got["backend"] == backend
    for path in [got["host"], got.get("device", got["host"])]:
        assert path["batches"] == 8 and path["kinds"] == ["float32 (4, 16, 16, 3)"] and path["normalise_on"] is None
        assert path["max"] > 50 and path["labels_ok"], "0-255 floats, as the transform returned them"


@pytest.mark.tf
def test_tf_batch_transform_sees_normalised_floats(colour_dataset, tf_sees_a_gpu):
    """The batch transform's `.map` gets float32 normalised images."""
    seen: list[str] = []

    def doubled(images, labels):
        seen.append(images.dtype.name)  # when traced
        return images * 2.0, labels

    expected, _, _ = _tf_epochs(colour_dataset, 1, augment=RECIPE)
    got, settings, _ = _tf_epochs(colour_dataset, 1, augment=RECIPE, batch_transform=doubled)
    assert settings["normalise_on"] == "host"
    assert seen and set(seen) == {"float32"}
    assert len(got[0]) == len(expected[0]) == 8
    for (labels, images), (host_labels, host_images) in zip(got[0], expected[0], strict=True):
        assert np.array_equal(labels, host_labels)
        np.testing.assert_allclose(images, 2.0 * host_images, rtol=1e-6, atol=1e-5)


@pytest.mark.tf
@pytest.mark.keras
@pytest.mark.slow
@pytest.mark.filterwarnings("ignore:Your input ran out of data")
def test_keras_on_tensorflow_with_a_gpu_says_host_and_fits(colour_dataset, tf_sees_a_gpu):
    """Keras' TensorFlow backend gets the tf adapter's dataset: normalised on the host, said so."""
    import keras

    from helpers.keras_fit import tiny_classifier

    keras.utils.set_random_seed(0)
    train = iofeed.loader(colour_dataset, batch_size=4, image_size=SIZE, workers=1, seed=11, framework="keras")
    with train.iofeed_loader as loader:
        assert loader.stats.settings["normalise_on"] == "host"
        history = tiny_classifier(SIZE).fit(train, epochs=2, shuffle=False, verbose=0)  # the loader shuffles
        assert loader.epoch == 2 and loader.stats.images == 2 * 32
    assert len(history.history["loss"]) == 2 and all(np.isfinite(history.history["loss"]))


@pytest.mark.keras
@pytest.mark.torch
@pytest.mark.slow  # a process importing Keras and torch
def test_keras_torch_device_path_gives_the_host_paths_pixels_and_fits(colour_dataset, tmp_path):
    """Keras' torch backend with its device forced to "cpu": the device path's tensors equal the host
    path's, labels intact, the setting says where, and `fit` trains on them (today: host only)."""
    got = run_on_backend("helpers.keras_device", colour_dataset, tmp_path / "device.json", "torch")
    assert got["normalise_on"] == ["host", "cpu"]
    host, device = got["host"], got["device"]
    assert len(device["labels"]) == len(host["labels"]) == 8
    assert device["labels"] == host["labels"], "the same batches, in the same order"
    assert device["pixel_labels"] == device["labels"], "each image's pixels still say its label"
    assert device["types"] == ["torch.float32 cpu (4, 32, 32, 3)"] and host["types"] == device["types"]
    assert device["max_difference"] <= 1e-5
    assert device["changed"] == host["changed"] == 0, "batches kept to the end of the epoch stay as delivered"
    assert got["fit_steps"] == 3 and all(np.isfinite(got["fit_loss"]))


def test_doctor_names_host_normalisation_while_the_gpu_waits():
    """`iofeed doctor` reads `normalise_on` from the loaders' stats: host normalisation beside a GPU
    and a waiting loop is named, with the device paths as advice; not without a GPU, a wait, or on
    a device."""
    from iofeed.cli.doctor.patterns import host_normalise_finding

    def stats(where, wait=4.0):
        return {"images": 1000, "wait_seconds": wait, "elapsed_seconds": 10.0, "settings": {"normalise_on": where}}

    finding = host_normalise_finding([stats("cuda:0"), stats("host")], gpus=1)
    assert finding is not None and finding.code == "host-normalise" and finding.heuristic
    assert "40% of 10 s" in finding.evidence[1]
    assert any("framework='tf'" in a and "augment='uint8'" in a for a in finding.advice)
    assert host_normalise_finding([stats("host")], gpus=0) is None, "no GPU: nothing waits for it"
    assert host_normalise_finding([stats("host", wait=1.0)], gpus=1) is None, "the loop hardly waits"
    assert host_normalise_finding([stats("cuda:0"), stats(None)], gpus=1) is None


@pytest.mark.tf
def test_doctor_reads_the_tf_loader_s_host_normalisation_with_a_gpu(colour_dataset, tf_sees_a_gpu):
    """What a tf loader records with a GPU visible is what the doctor reads: host normalisation
    beside a waiting GPU is named (it said "/gpu:0", so the doctor believed the GPU did it)."""
    from iofeed.cli.doctor.patterns import host_normalise_finding

    dataset = iofeed.loader(colour_dataset, batch_size=4, image_size=SIZE, workers=1, framework="tf", augment=RECIPE)
    with dataset.iofeed_loader as loader:
        stats = {**loader.stats.as_dict(), "wait_seconds": 5.0, "elapsed_seconds": 10.0}
    finding = host_normalise_finding([stats], gpus=1)
    assert finding is not None and finding.code == "host-normalise", stats["settings"]


@pytest.mark.torch
@pytest.mark.gpu
def test_keras_torch_cuda_path_normalises_the_uint8_batch_on_the_gpu(colour_dataset):
    """The CUDA twin (no Keras needed): uint8 batches copied to the GPU and normalised there equal
    the host path's, labels and all."""
    import torch

    from iofeed.adapters.keras_torch import TorchBatches
    from iofeed.adapters.normalize import uint8_affine
    from iofeed.engines.base import Batch

    affine = uint8_affine(MEAN, STD)
    on_gpu, on_host = TorchBatches(affine, device="cuda:0"), TorchBatches(affine)
    checked = 0
    with iofeed.loader(colour_dataset, batch_size=4, image_size=SIZE, workers=1) as plain:
        for images, labels in plain:
            batch = Batch(images=np.array(images), labels=np.array(labels), indices=np.arange(len(labels)))
            gpu_images, gpu_labels = on_gpu(batch)
            host_images, host_labels = on_host(batch)
            assert gpu_images.device.type == "cuda" and gpu_images.dtype == torch.float32
            torch.testing.assert_close(gpu_images.cpu(), host_images, rtol=1e-6, atol=1e-5)
            assert gpu_labels.cpu().tolist() == host_labels.tolist() == labels.tolist()
            assert [label_from_pixels(pixels_of(image)) for image in gpu_images.cpu().numpy()] == labels.tolist()
            checked += 1
    on_gpu.close()
    assert checked == 8
