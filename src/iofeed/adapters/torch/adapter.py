"""PyTorch adapter: normalised NCHW tensors on the device (contiguous, or channels_last memory), converted there."""
from __future__ import annotations

import sys
from typing import Any

import numpy as np
import torch

from ...augment.transforms import BatchTransform
from ...engines.base import Batch
from ...engines.workers.packing import PackedImages
from ...options.loader_options import LoaderOptions
from ..base import EpochLoader
from ..host_float import affine_per_image
from ..normalize import HOST, IMAGENET_AFFINE, Affine, options_affine, record_normalise_on
from .gpu_augment import crop_resize_packed
from .host_to_device import HostToDevice

PACKED_META = ("offset", "height", "width", "box", "flip")


class TorchAdapter:
    """uint8 NHWC batches → (images, labels) tensors on `device`.

    Images are `dtype` (float32 by default), normalised with ImageNet mean/std, NCHW: contiguous
    by default (PyTorch's default format, which a model not converted to channels_last and DDP's
    gradient buckets expect), or in channels_last memory with `channels_last=True`. They are
    made channels_last either way (the affine runs over NHWC rows, as the pixels arrive) and
    copied into a contiguous tensor for the default. For CUDA the uint8 batch and its labels go
    through pinned memory on a copy stream of their own (`HostToDevice`), and conversion and
    normalisation run on the GPU.
    Labels are always a copy (the backend reuses its arrays). On the CPU, output
    tensors are recycled once nothing outside the adapter refers to them any more (fresh
    38 MB tensors per batch would cost more in page faults than the normalisation itself).

    Packed batches (`gpu_augment=True`) arrive as stored pixels with crop boxes: they are
    copied as they are, then cropped, resized to `image_size` and flipped on the device.

    `affine` None (a recipe with `normalize=False`) hands out uint8 NCHW (channels_last) instead;
    float32 images (a sample transform's output) are handed out as they are, in `dtype`. A
    `batch_transform` runs last, on the device.
    """

    def __init__(self, device: Any = None, dtype: Any = None, image_size: int = 224,
                 affine: Affine | None = IMAGENET_AFFINE, batch_transform: Any = None,
                 channels_last: bool = False) -> None:
        self.device = torch.device(device if device is not None else "cpu")
        self.channels_last = channels_last
        self.normalising = affine is not None
        self.normalise_on = None if not self.normalising else HOST if self.device.type == "cpu" else str(self.device)
        self.dtype = dtype if dtype is not None else (torch.float32 if self.normalising else torch.uint8)
        # per-channel affine in NHWC order: x * scale + shift == (x / 255 - mean) / std, computed
        # in float32 (float64 if asked) and rounded once to a narrower `dtype`
        compute = torch.float64 if self.dtype == torch.float64 else torch.float32
        self._scale, self._shift = (torch.tensor(v, dtype=compute, device=self.device)
                                    for v in (affine or IMAGENET_AFFINE))
        self._batch_transform = None if batch_transform is None else BatchTransform(
            batch_transform, self.device if self.device.type == "cuda" else None)
        self._tiled: dict[int, tuple[Any, Any]] = {}
        self._outputs: list[Any] = []
        self._copier: HostToDevice | None = None
        self.image_size = image_size

    @classmethod
    def from_options(cls, options: LoaderOptions) -> TorchAdapter:
        """The adapter for `options`: its device, dtype, image size, normalisation and batch transform."""
        return cls(options.device, options.dtype, options.image_size, options_affine(options), options.batch_transform,
                   options.memory_format == "channels_last")

    def wrap(self, loader: EpochLoader) -> EpochLoader:
        """The loader itself; `stats.settings["normalise_on"]` says where it normalises."""
        record_normalise_on(loader, self.normalise_on)
        return loader

    def __call__(self, batch: Batch) -> tuple[Any, Any]:
        images = batch.images
        as_is = isinstance(images, np.ndarray) and images.dtype != np.uint8  # a sample transform's floats
        labels = torch.from_numpy(np.array(batch.labels))  # a copy in its own dtype (int64, multi-hot, soft)
        if isinstance(images, PackedImages):
            images, labels = self._augment_packed(images, labels, batch)
        elif isinstance(images, np.ndarray):
            images, labels = self._to_device(torch.from_numpy(images), labels, batch=batch)
        else:  # a GPU backend's batch, handed over by DLPack
            images = torch.from_dlpack(images).to(self.device)
            (labels,) = self._to_device(labels)
        images = self.normalise(images, as_is)
        if self.device.type != "cuda":  # for CUDA the copier releases it, once its copy is done
            batch.release()  # normalised out of the engine's memory
        if self._batch_transform is not None:
            return self._batch_transform(images, labels, batch.key)
        return images, labels

    def _augment_packed(self, packed: PackedImages, labels: Any, batch: Batch) -> tuple[Any, Any]:
        """Stored pixels to the device as they are, then crop, resize and flip there."""
        meta = [torch.from_numpy(np.ascontiguousarray(packed.meta[name])) for name in PACKED_META]
        data, labels, *meta = self._to_device(torch.from_numpy(packed.data[: packed.used_bytes]), labels, *meta,
                                              batch=batch)
        return crop_resize_packed(data, dict(zip(PACKED_META, meta)), self.image_size), labels

    def normalise(self, images: Any, as_is: bool = False) -> Any:
        """uint8 (or 0–255 float) NHWC → `dtype` NCHW, normalised, on the same device; rounded to
        uint8 without normalisation; `as_is` images only converted to `dtype`. Contiguous unless
        `channels_last`."""
        out = self._normalise_nhwc(images, as_is)
        if self.channels_last:
            return out
        dense = self._output(tuple(out.shape), out.dtype, torch.contiguous_format)
        dense.copy_(out)
        return dense

    def _normalise_nhwc(self, images: Any, as_is: bool) -> Any:
        """`normalise` into channels_last memory."""
        n, h, w, c = images.shape
        out = self._output((n, c, h, w), torch.float32 if as_is and self.dtype == torch.uint8 else self.dtype,
                           torch.channels_last)
        flat = out.permute(0, 2, 3, 1).view(n, h * w * c)  # NHWC order, contiguous
        source = images.reshape(n, h * w * c)
        if as_is or not self.normalising:
            if source.is_floating_point() and out.dtype == torch.uint8:  # packed pixels: 0-255 floats
                source = source.round().clamp_(0, 255)
            flat.copy_(source)
            return out
        scale, shift = self._tiled_affine(h * w)
        if flat.dtype != scale.dtype:  # half precision
            flat.copy_(torch.addcmul(shift, source.to(scale.dtype), scale))
        elif self.device.type == "cpu":
            affine_per_image(source.numpy(), flat.numpy(), scale.numpy(), shift.numpy())
        else:
            flat.copy_(source)
            flat.mul_(scale).add_(shift)
        return out

    def _tiled_affine(self, pixels: int) -> tuple[Any, Any]:
        """Scale and shift repeated over a whole image, so the kernels run on long rows."""
        if pixels not in self._tiled:
            self._tiled[pixels] = (self._scale.repeat(pixels), self._shift.repeat(pixels))
        return self._tiled[pixels]

    def _output(self, shape: tuple[int, int, int, int], dtype: Any, memory_format: Any) -> Any:
        """An output tensor in `memory_format`: on the CPU a recycled one nobody else holds, if any."""
        if self.device.type == "cpu" and hasattr(torch._C, "_storage_Use_Count"):
            for tensor in self._outputs:
                if tensor.shape == shape and tensor.dtype == dtype and \
                        tensor.is_contiguous(memory_format=memory_format) and _unreferenced(tensor):
                    return tensor
        out = torch.empty(shape, dtype=dtype, device=self.device, memory_format=memory_format)
        if self.device.type == "cpu":
            self._outputs = [out, *self._outputs[:MAX_RECYCLED - 1]]
        return out

    def close(self) -> None:
        """Let go of the engine memory the CUDA copies pinned in place (the Loader's close, before the engine's)."""
        if self._copier is not None:
            self._copier.close()

    def _to_device(self, *tensors: Any, batch: Batch | None = None) -> Any:
        """Host tensors on the device: as they are on the CPU; for CUDA through `HostToDevice`, which
        copies `tensors[0]` straight from `batch`'s engine memory when it can, and releases it."""
        if self.device.type != "cuda":
            return tensors
        if self._copier is None:
            self._copier = HostToDevice(self.device)
        if batch is None:
            return self._copier.copy(*tensors)
        return self._copier.copy(*tensors, region=batch.region, release=batch.release)


MAX_RECYCLED = 6  # the caller's batches and the prefetched ones, and the channels_last scratch


def _unreferenced(tensor: Any) -> bool:
    """Whether only the adapter's list refers to `tensor` and its memory (no views, no arrays).

    Python references when free: the list, the caller's loop variable, this function's argument
    and getrefcount's own; storage users when free: the tensor and the temporary storage object.
    """
    return sys.getrefcount(tensor) <= 4 and torch._C._storage_Use_Count(tensor.untyped_storage()._cdata) <= 2
