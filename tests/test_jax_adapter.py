"""The JAX adapter: sharded jax.Arrays equal to the numpy loader's pixels, the engine contract
through it, a training epoch over 2 forced host devices, and 2 "hosts" under jax.distributed."""
from __future__ import annotations

import functools
import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import iofeed
from helpers.contract import (
    ContractData,
    check_epochs_back_to_back_match_fresh_loaders,
    check_order_independent_of_worker_count,
    check_resume_mid_epoch,
)
from iofeed.errors import OptionError

pytestmark = pytest.mark.jax

SIZE = 32
MEAN = np.array([0.485, 0.456, 0.406])
STD = np.array([0.229, 0.224, 0.225])
TESTS = Path(__file__).resolve().parent


def _first_batches(source, batches=3, **options):
    options = {"batch_size": 4, "image_size": SIZE, "workers": 1, "seed": 3, **options}
    with iofeed.loader(source, **options) as ld:
        out = []
        for images, labels in ld:
            # copies: the numpy loader's arrays are views of slots reused later
            out.append((np.array(images.astype("float32") if options.get("framework") == "jax" else images),
                        np.array(labels)))
            if len(out) == batches:
                return out
    raise AssertionError("fewer batches than asked")


@pytest.mark.parametrize(("dtype", "atol"), [(None, 1e-5), ("bfloat16", 0.02), ("uint8", 0)])
def test_batches_equal_the_numpy_loader(colour_dataset, dtype, atol):
    import jax

    expected = _first_batches(colour_dataset)
    got = _first_batches(colour_dataset, framework="jax", output=iofeed.Output(dtype=dtype))
    with iofeed.loader(colour_dataset, framework="jax", batch_size=4, image_size=SIZE, workers=1,
                       output=iofeed.Output(dtype=dtype)) as ld:
        images, labels = next(iter(ld))
        assert isinstance(images, jax.Array) and images.shape == (4, SIZE, SIZE, 3)
        assert images.dtype.name == (dtype or "float32") and labels.dtype.name == "int32"
        assert images.sharding.spec[0] == "batch"
    for (images, labels), (uint8, labels_np) in zip(got, expected, strict=True):
        assert np.array_equal(labels, labels_np)
        want = uint8 if dtype == "uint8" else (uint8 / 255.0 - MEAN) / STD
        np.testing.assert_allclose(images, want, atol=atol, rtol=0.01 if dtype == "bfloat16" else 0)


def test_batches_handed_out_stay_valid(colour_dataset):
    """A batch kept by the caller is not overwritten when its host memory would be reused."""
    with iofeed.loader(colour_dataset, framework="jax", batch_size=4, image_size=SIZE, workers=1) as ld:
        kept = [(images, np.asarray(images).copy()) for images, _ in ld]
    assert len(kept) == 8
    for images, copy in kept:
        assert np.array_equal(np.asarray(images), copy)


@pytest.mark.parametrize("check", [check_order_independent_of_worker_count, check_resume_mid_epoch,
                                   check_epochs_back_to_back_match_fresh_loaders], ids=lambda c: c.__name__)
def test_engine_contract_through_the_jax_adapter(colour_dataset, colour_tree, tmp_path, check):
    check(functools.partial(iofeed.loader, framework="jax"), ContractData(colour_dataset, colour_tree, tmp_path))


@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "uint8"])
def test_a_sample_transforms_floats_are_handed_over_as_they_are(colour_dataset, dtype):
    """`transform=` returning 0-255 float32 (half the side): handed over at its scale, cast to
    `dtype` (uint8 asked: float32, as torch does), not normalised again as if pixels; it was
    (values around -2..2 with ImageNet's mean/std), where torch and tf hand it over as it is."""
    from helpers.images import label_from_pixels
    from helpers.transforms import downscale

    with iofeed.loader(colour_dataset, framework="jax", output=iofeed.Output(dtype=dtype), transform=downscale,
                       batch_size=4,
                       image_size=SIZE, workers=1) as ld:
        assert ld.stats.settings["normalise_on"] is None
        batches = [(np.asarray(images).astype(np.float32), np.asarray(labels), images.dtype) for images, labels in ld]
    assert len(batches) == 8
    for images, labels, kind in batches:
        assert str(kind) == ("float32" if dtype == "uint8" else dtype) and images.shape == (4, SIZE // 2, SIZE // 2, 3)
        assert images.max() > 50 and [label_from_pixels(image) for image in images] == labels.tolist()


@pytest.mark.parametrize(("options", "word"), [
    ({"framework": "jax", "output": iofeed.Output(dtype="float16")}, "dtype"),
    ({"framework": "jax", "placement": iofeed.Placement(sharding="batch")}, "sharding"),
    ({"framework": "numpy", "placement": iofeed.Placement(sharding=object())}, "sharding"),
])
def test_bad_dtype_or_sharding_is_one_line(colour_dataset, options, word):
    with pytest.raises(OptionError, match=word) as info:
        iofeed.loader(colour_dataset, batch_size=4, **options)
    assert "\n" not in str(info.value)


def _run(*args: str, timeout: float = 240, **env: str) -> subprocess.Popen:
    path = os.pathsep.join([str(TESTS.parent / "src"), str(TESTS), os.environ.get("PYTHONPATH", "")])
    return subprocess.Popen([sys.executable, "-m", "helpers.jax_runs", *args], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env={**os.environ, "PYTHONPATH": path, **env})


def _wait(process: subprocess.Popen, timeout: float = 240) -> None:
    _, err = process.communicate(timeout=timeout)
    assert process.returncode == 0, err[-3000:]


@pytest.mark.slow
def test_optax_training_epoch_on_two_sharded_host_devices(colour_dataset, tmp_path):
    pytest.importorskip("optax")  # the training step's optimiser (not an iofeed dependency)
    out = tmp_path / "train.json"
    _wait(_run("train", str(colour_dataset), str(out), XLA_FLAGS="--xla_force_host_platform_device_count=2"))
    result = json.loads(out.read_text())
    assert result["devices"] == 2
    assert result["batches"] == [result["len"], 2 * result["len"]] and result["len"] == 4
    assert all(shards == [[0, 4], [1, 4]] for shards in result["shards"]), result["shards"]
    losses = result["losses"]
    assert all(np.isfinite(losses)) and np.mean(losses[-4:]) < losses[0], losses


@pytest.mark.slow
def test_two_hosts_under_jax_distributed_get_disjoint_halves(colour_dataset, tmp_path):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    outs = [tmp_path / f"host{i}.json" for i in range(2)]
    runs = [_run("host", str(colour_dataset), str(outs[i]), str(i), str(port)) for i in range(2)]
    for run in runs:
        _wait(run)
    results = [json.loads(out.read_text()) for out in outs]
    assert [r["settings"] for r in results] == [{"rank": 0, "world_size": 2}, {"rank": 1, "world_size": 2}]
    assert results[0]["batches"] == results[1]["batches"] == 4
    assert all(shape == [8, SIZE, SIZE, 3] for r in results for shape in r["shapes"]), "global batch of 2 x 4"
    halves = [{i for batch in r["indices"] for i in batch} for r in results]
    assert not halves[0] & halves[1] and len(halves[0] | halves[1]) == 32
    for rank, r in enumerate(results):  # each host's devices hold exactly its own samples' labels
        expected = _numpy_labels(colour_dataset, rank)
        assert r["local"] == expected


def _numpy_labels(source, rank):
    with iofeed.loader(source, batch_size=4, image_size=SIZE, workers=1, seed=2,
                       placement=iofeed.Placement(rank=rank, world_size=2)) as ld:
        return [np.asarray(labels).tolist() for _, labels in ld]


class _DeviceBatch:
    """A GPU engine's batch as the JAX adapter receives it: DLPack only, no host conversion (DALI's
    GPU tensors have none). Here over host memory, so the path runs on the CPU."""

    def __init__(self, pixels: np.ndarray) -> None:
        self._pixels = pixels

    def __dlpack__(self, *args, **kwargs):
        return self._pixels.__dlpack__(*args, **kwargs)

    def __dlpack_device__(self):
        return self._pixels.__dlpack_device__()

    def __array__(self, *args, **kwargs):
        raise AssertionError("a device batch was copied through the host")


@pytest.mark.parametrize("dtype", ["float32", "uint8"])
def test_a_gpu_engine_s_batch_is_taken_by_dlpack_not_through_the_host(dtype):
    """DALI on a GPU handed JAX its batches copied to the host, which JAX copied back (device → host →
    device). Now the adapter takes the engine's device tensor by DLPack and normalises it there."""
    from iofeed.adapters.jax import JaxAdapter
    from iofeed.adapters.normalize import IMAGENET_AFFINE
    from iofeed.engines.base import Batch

    pixels = np.random.default_rng(0).integers(0, 256, (4, SIZE, SIZE, 3), dtype=np.uint8)
    adapter = JaxAdapter(dtype, affine=IMAGENET_AFFINE)
    images, labels = adapter(Batch(images=_DeviceBatch(pixels), labels=np.arange(4), indices=np.arange(4)))
    expected = pixels if dtype == "uint8" else (pixels / 255.0 - MEAN) / STD
    np.testing.assert_allclose(np.asarray(images, np.float64), expected, rtol=1e-5, atol=1e-5)
    assert str(images.dtype) == dtype and np.asarray(labels).tolist() == [0, 1, 2, 3]
    assert images.sharding.is_equivalent_to(adapter.sharding, 4)


def test_gpu_engines_keep_jax_batches_on_the_gpu():
    """Whether an engine decoding on a GPU copies its batches to the host, per framework: JAX takes
    them where they are when the loader's device is a GPU."""
    from iofeed.options.adapter_choices import wants_host_arrays

    assert wants_host_arrays("jax", cuda=True) is False and wants_host_arrays("jax", cuda=False) is True
    assert wants_host_arrays("torch", cuda=True) is False
    assert wants_host_arrays("tf", cuda=True) is True and wants_host_arrays("numpy", cuda=True) is True


@pytest.mark.gpu
@pytest.mark.torch
def test_a_cuda_batch_reaches_jax_on_the_gpu_without_the_host():
    """The CUDA twin, with a torch CUDA tensor standing in for a GPU engine's batch (DALI is not on
    the GPU host): JAX's array lies on the GPU and holds the normalised pixels."""
    import jax
    import torch

    from iofeed.adapters.jax import JaxAdapter
    from iofeed.adapters.normalize import IMAGENET_AFFINE
    from iofeed.engines.base import Batch

    os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")
    pixels = np.random.default_rng(0).integers(0, 256, (4, SIZE, SIZE, 3), dtype=np.uint8)
    gpu = jax.devices("gpu")[:1]
    sharding = jax.sharding.NamedSharding(jax.sharding.Mesh(np.array(gpu), ("batch",)),
                                          jax.sharding.PartitionSpec("batch"))
    adapter = JaxAdapter("float32", sharding=sharding, affine=IMAGENET_AFFINE)
    device_pixels = torch.from_numpy(pixels).cuda()
    images, _ = adapter(Batch(images=device_pixels, labels=np.arange(4), indices=np.arange(4)))
    assert {d.platform for d in images.devices()} == {"gpu"}
    np.testing.assert_allclose(np.asarray(images), (pixels / 255.0 - MEAN) / STD, rtol=1e-5, atol=1e-5)
