"""PyTorch adapter: normalised NCHW tensors on the device (contiguous, or channels_last memory), converted there."""
from __future__ import annotations

import weakref
from typing import Any

import numpy as np
import torch
from torch.utils.dlpack import from_dlpack

from ...augment.transforms import BatchTransform
from ...engines.base import Batch
from ...engines.workers.packing import PackedImages
from ...options.loader_options import LoaderOptions
from ..base import EpochLoader
from ..normalised_twice import check_output_range, check_torch_model
from ..normalize import HOST, IMAGENET_AFFINE, Affine, options_affine, record_normalise_on
from .gpu_augment import crop_resize_chunks
from .host_to_device import HostToDevice
from .layout import TorchLayout

PACKED_META = ("offset", "height", "width", "box", "flip")


class TorchAdapter:
    """uint8 NHWC batches → (images, labels) tensors on `device`.

    Images are `dtype` (float32 by default), normalised with ImageNet mean/std, NCHW: contiguous
    by default (PyTorch's default format, which a model not converted to channels_last and DDP's
    gradient buckets expect), or in channels_last memory with `channels_last=True`. Either layout
    is written in the pass that normalises (`TorchLayout`): the default costs what channels_last
    costs. For CUDA the uint8 batch and its labels go through pinned memory on a copy stream of
    their own (`HostToDevice`), and conversion and normalisation run on the GPU, one kernel.
    Labels are always a copy (the engine reuses its arrays). On the CPU, output tensors lie in
    memory lent by the layout's `OutputPool`: reused once the last tensor or array over a batch
    is gone (its lease), never while the consumer holds it.

    Packed batches (`gpu_augment=True`) arrive as stored pixels with crop boxes: they are
    copied as they are, then cropped, resized to `image_size` and flipped on the device, chunk
    by chunk (bounded temporaries), each chunk normalised into the output as it is made.

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
        self.layout = TorchLayout(self.device, affine, channels_last)
        self._batch_transform = None if batch_transform is None else BatchTransform(
            batch_transform, self.device if self.device.type == "cuda" else None)
        self._copier: HostToDevice | None = None
        self.image_size = image_size
        self._affine = affine
        self._first_of: Any = None  # the loader whose first batch is still to come (checked for normalising twice)

    @classmethod
    def from_options(cls, options: LoaderOptions) -> TorchAdapter:
        """The adapter for `options`: its device, dtype, image size, normalisation and batch transform."""
        output = options.output
        return cls(options.device, output.dtype, options.resolved_image_size, options_affine(options),
                   options.batch_transform, output.memory_format == "channels_last")

    def wrap(self, loader: EpochLoader) -> EpochLoader:
        """The loader itself; `stats.settings["normalise_on"]` says where it normalises."""
        record_normalise_on(loader, self.normalise_on)
        self._first_of = weakref.ref(loader)
        return loader

    def __call__(self, batch: Batch) -> tuple[Any, Any]:
        images = batch.images
        as_is = isinstance(images, np.ndarray) and images.dtype != np.uint8  # a sample transform's floats
        labels = torch.from_numpy(np.array(batch.labels))  # a copy in its own dtype (int64, multi-hot, soft)
        if isinstance(images, PackedImages):
            images, labels = self._augment_packed(images, labels, batch)
        else:
            if isinstance(images, np.ndarray):
                images, labels = self._to_device(torch.from_numpy(images), labels, batch=batch)
            else:  # a GPU engine's batch, handed over by DLPack
                images = from_dlpack(images).to(self.device)
                (labels,) = self._to_device(labels)
            images = self.normalise(images, as_is)
        if self.device.type != "cuda":  # for CUDA the copier releases it, once its copy is done
            batch.release()  # normalised out of the engine's memory
        first = self._first_of() if self._first_of is not None else None
        if first is not None:  # the model training now is up the call stack (the loop asking for batches)
            self._first_of = None
            check_torch_model(first)
        if self._batch_transform is not None:
            images, labels = self._batch_transform(images, labels, batch.key)
            if first is not None and not as_is:
                check_output_range(first, images, self._affine)
        return images, labels

    def _augment_packed(self, packed: PackedImages, labels: Any, batch: Batch) -> tuple[Any, Any]:
        """Stored pixels to the device as they are, then crop, resize and flip there, each chunk of
        the batch written into the output (normalised, in its layout) as it is made."""
        meta = [torch.from_numpy(np.ascontiguousarray(packed.meta[name])) for name in PACKED_META]
        data, labels, *meta = self._to_device(torch.from_numpy(packed.data[: packed.used_bytes]), labels, *meta,
                                              batch=batch)
        side = self.image_size
        out = self.layout.output((len(meta[0]), 3, side, side), self.dtype)
        for rows, pixels in crop_resize_chunks(data, dict(zip(PACKED_META, meta)), side):
            self.layout.write(out[rows], pixels)
        return out, labels

    def normalise(self, images: Any, as_is: bool = False) -> Any:
        """uint8 (or 0–255 float) NHWC → `dtype` NCHW, normalised, on the same device, written once
        in the layout asked for; rounded to uint8 without normalisation; `as_is` images only
        converted to `dtype`. Contiguous unless `channels_last`."""
        n, h, w, c = images.shape
        out = self.layout.output((n, c, h, w), torch.float32 if as_is and self.dtype == torch.uint8 else self.dtype)
        self.layout.write(out, images, as_is)
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


