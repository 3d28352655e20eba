"""The layout a model asks for is written in the pass that normalises or copies (issue 42): the torch
default (contiguous NCHW) cost a channels_last pass and then a copy. Seen through the kernels PyTorch
ran (a dispatch mode), values checked against numpy; the CUDA path's kernels run here on the "meta"
device, which runs the same code without data."""
from __future__ import annotations

import numpy as np
import pytest

from iofeed.adapters.normalize import IMAGENET_AFFINE

N, SIZE = 4, 24


def _pixels(n: int = N, size: int = SIZE) -> np.ndarray:
    return np.random.default_rng(0).integers(0, 256, (n, size, size, 3), dtype=np.uint8)


def _expected(pixels: np.ndarray) -> np.ndarray:
    scale, shift = (np.asarray(v, np.float32) for v in IMAGENET_AFFINE)
    return pixels.astype(np.float32) * scale + shift  # NHWC


@pytest.mark.parametrize("order", ["nhwc", "nchw"])
@pytest.mark.parametrize("dtype", [np.float32, np.float16, np.float64])
def test_the_host_writer_gives_numpy_s_affine_in_either_order(order, dtype):
    from iofeed.adapters.host_float import NHWC, HostAffine

    pixels = _pixels()
    out = np.empty((N, SIZE, SIZE, 3) if order == NHWC else (N, 3, SIZE, SIZE), dtype)
    HostAffine(IMAGENET_AFFINE, dtype).write(pixels, out, order)
    expected = _expected(pixels).astype(dtype)
    np.testing.assert_array_equal(out, expected if order == NHWC else expected.transpose(0, 3, 1, 2))


@pytest.mark.parametrize("order", ["nhwc", "nchw"])
def test_the_host_writer_without_opencv_gives_the_same_values(order, monkeypatch):
    import iofeed.adapters.host_float as host_float
    from iofeed.adapters.host_float import NCHW, NHWC, HostAffine, write_uint8

    monkeypatch.setattr(host_float, "_cv2", lambda: None)
    pixels = _pixels()
    out = np.empty((N, SIZE, SIZE, 3) if order == NHWC else (N, 3, SIZE, SIZE), np.float32)
    HostAffine(IMAGENET_AFFINE).write(pixels, out, order)
    np.testing.assert_array_equal(out, _expected(pixels) if order == NHWC else _expected(pixels).transpose(0, 3, 1, 2))
    planes = np.empty((N, 3, SIZE, SIZE), np.uint8)
    write_uint8(pixels, planes, NCHW)
    np.testing.assert_array_equal(planes, pixels.transpose(0, 3, 1, 2))


@pytest.mark.torch
@pytest.mark.parametrize("channels_last", [False, True], ids=["contiguous", "channels_last"])
@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "uint8"])
def test_torch_cpu_batches_are_written_once_in_their_layout(channels_last, dtype):
    """No kernel copies the batch after it is written: the default wrote channels_last, then copied."""
    import torch

    from helpers.torch_ops import BatchWrites
    from iofeed.adapters.torch.adapter import TorchAdapter

    affine = None if dtype == "uint8" else IMAGENET_AFFINE
    adapter = TorchAdapter("cpu", getattr(torch, dtype), SIZE, affine, channels_last=channels_last)
    pixels = _pixels()
    with BatchWrites(pixels.size) as writes:
        out = adapter.normalise(torch.from_numpy(pixels))
    assert out.is_contiguous(memory_format=torch.channels_last if channels_last else torch.contiguous_format)
    assert out.shape == (N, 3, SIZE, SIZE) and out.dtype == getattr(torch, dtype)
    # float32 and uint8: OpenCV writes the tensor's memory (no kernel); bfloat16: one addcmul
    assert writes.ops == (["addcmul"] if dtype == "bfloat16" else []), writes.ops
    expected = pixels.transpose(0, 3, 1, 2) if dtype == "uint8" else _expected(pixels).transpose(0, 3, 1, 2)
    tolerance = 0.02 if dtype == "bfloat16" else 0  # bfloat16 keeps 8 bits: 2**-8 of values below 3
    np.testing.assert_allclose(out.float().numpy(), expected, atol=tolerance, rtol=tolerance)


@pytest.mark.torch
@pytest.mark.parametrize("channels_last", [False, True], ids=["contiguous", "channels_last"])
@pytest.mark.parametrize("dtype", ["float32", "float16", "uint8"])
def test_the_cuda_path_writes_the_batch_in_one_kernel(channels_last, dtype):
    """The CUDA code path, run on the meta device: one kernel writes the normalised batch in its layout
    (today: a copy, a multiply and an add into channels_last, then a copy into contiguous memory)."""
    import torch

    from helpers.torch_ops import BatchWrites
    from iofeed.adapters.torch.adapter import TorchAdapter

    affine = None if dtype == "uint8" else IMAGENET_AFFINE
    adapter = TorchAdapter("meta", getattr(torch, dtype), SIZE, affine, channels_last=channels_last)
    pixels = torch.empty((N, SIZE, SIZE, 3), dtype=torch.uint8, device="meta")
    with BatchWrites(pixels.numel()) as writes:
        out = adapter.normalise(pixels)
    assert out.is_contiguous(memory_format=torch.channels_last if channels_last else torch.contiguous_format)
    assert writes.ops == (["copy"] if dtype == "uint8" else ["addcmul"]), writes.ops


@pytest.mark.torch
def test_the_cuda_kernel_gives_numpy_s_values_in_each_layout():
    """The kernel path's values (run on CPU tensors), against numpy's, contiguous and channels_last."""
    import torch

    from iofeed.adapters.torch.layout import TorchLayout

    pixels = _pixels()
    for channels_last in (False, True):
        layout = TorchLayout("cpu", IMAGENET_AFFINE, channels_last)
        out = torch.empty((N, 3, SIZE, SIZE), memory_format=torch.channels_last if channels_last else
                          torch.contiguous_format)
        shift, scale = layout._kernel_affine(torch.float32)
        torch.addcmul(shift, torch.from_numpy(pixels).permute(0, 3, 1, 2), scale, out=out)
        np.testing.assert_allclose(out.numpy(), _expected(pixels).transpose(0, 3, 1, 2), rtol=1e-6, atol=1e-6)


@pytest.mark.torch
def test_keras_torch_device_path_normalises_in_one_kernel():
    """Keras' torch backend on its device: a cast, a multiply and an add were three passes."""
    import torch

    from helpers.torch_ops import BatchWrites
    from iofeed.adapters.keras_torch import TorchBatches
    from iofeed.engines.base import Batch

    pixels = _pixels()
    batch = Batch(images=pixels, labels=np.arange(N), indices=np.arange(N))
    with BatchWrites(pixels.size) as writes:
        images, labels = TorchBatches(IMAGENET_AFFINE, device="cpu")(batch)
    assert writes.ops == ["addcmul"], writes.ops
    assert images.shape == (N, SIZE, SIZE, 3) and labels.tolist() == list(range(N))
    np.testing.assert_allclose(images.numpy(), _expected(pixels), rtol=1e-6, atol=1e-6)
    assert images.dtype == torch.float32
