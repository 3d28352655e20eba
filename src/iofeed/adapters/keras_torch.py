"""Keras' PyTorch backend: uint8 batches copied to the CUDA device Keras trains on and normalised
there, else normalised on the host."""
from __future__ import annotations

from typing import Any

import numpy as np
import torch

from ..augment.transforms import BatchTransform
from ..engines.base import Batch
from ..runtime.gpu.device import loader_device
from .host_float import HostNormaliser
from .normalize import HOST, Affine
from .numpy import to_numpy
from .torch.host_to_device import HostToDevice


def training_device() -> str | None:
    """The CUDA device Keras' torch backend puts its tensors on ("cuda:N": `KERAS_TORCH_DEVICE`,
    else "cuda" when PyTorch sees a GPU, resolved as the loader resolves it), else None."""
    from keras.src.backend.torch.core import get_device

    device = torch.device(get_device())
    return loader_device(str(device)) if device.type == "cuda" else None


class TorchBatches:
    """One batch → NHWC float32 torch tensors (Keras' channels_last) and labels, normalised by
    `affine`: on `device` when given (the device path: the uint8 batch copied there, 4x fewer bytes
    than float32, straight from the engine's memory pinned in place when it can be, on a copy
    stream of its own (`HostToDevice`), then normalised there by one kernel), else on the host
    with numpy (tensors sharing the normalised arrays' memory). `device="cpu"` takes the device
    path on the CPU, with no copy. The `batch_transform` runs last, where the images are."""

    def __init__(self, affine: Affine, batch_transform: Any = None, device: str | None = None) -> None:
        self.normalise_on = device or HOST
        self._host = HostNormaliser(np.float32, affine) if device is None else None
        self._device = torch.device(device or "cpu")
        cuda = self._device.type == "cuda"
        self._copier = HostToDevice(self._device) if cuda else None
        self._scale, self._shift = (torch.tensor(v, dtype=torch.float32, device=self._device) for v in affine)
        self._transform = None if batch_transform is None else BatchTransform(batch_transform,
                                                                              self._device if cuda else None)

    def __call__(self, batch: Batch) -> tuple[Any, Any]:
        images, host_labels = to_numpy(batch)
        if images.dtype != np.uint8:  # a sample transform's floats: handed over at their scale, as elsewhere
            out, labels = torch.from_numpy(np.array(images, np.float32)), torch.from_numpy(np.array(host_labels))
            batch.release()
            out, labels = out.to(self._device), labels.to(self._device)
        elif self._host is not None:
            out = torch.from_numpy(self._host(images))  # torch keeps a reference: the array is reused once it lets go
            batch.release()  # the slot is copied out: the engine may reuse it
            labels = torch.from_numpy(np.array(host_labels))
        else:
            out, labels = self._on_device(batch)
        return (out, labels) if self._transform is None else self._transform(out, labels, batch.key)

    def _on_device(self, batch: Batch) -> tuple[Any, Any]:
        """The batch on the device, normalised there; its engine memory released once read."""
        images, labels = torch.from_numpy(batch.images), torch.from_numpy(np.array(batch.labels))
        if self._copier is not None:  # the copier releases the slot once its copy has completed
            images, labels = self._copier.copy(images, labels, region=batch.region, release=batch.release)
        out = torch.addcmul(self._shift, images, self._scale)  # one kernel; channels last: per-channel broadcast
        if self._copier is None:
            batch.release()  # read into `out` on this thread
        return out, labels

    def close(self) -> None:
        """Wait for the copies under way and unregister the engine memory pinned in place (the
        Loader's close, before the engine unmaps it)."""
        if self._copier is not None:
            self._copier.close()
