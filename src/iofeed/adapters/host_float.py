"""Normalised float batches on the host: aligned output arrays, recycled once nobody holds them."""
from __future__ import annotations

import sys
from typing import Any

import numpy as np

from .normalize import IMAGENET_AFFINE, Affine

ALIGN = 64  # TensorFlow and XLA take a host array without copying it only when it is this aligned
KEEP = 6  # output arrays kept for reuse: the prefetch depth downstream plus the caller's batch


def affine_per_image(source: np.ndarray, out: np.ndarray, scale: np.ndarray, shift: np.ndarray) -> None:
    """out[i] = source[i] * scale + shift, one image at a time, on this thread.

    On the CPU this runs in the training process beside the loader's workers: numpy keeps it
    on one thread (torch's intra-op threads spin between kernels and take the workers' cores;
    measured: docs/decisions/0063-host-float-normalises-with-numpy-on-one.md), and one image at a time keeps
    its three passes in the core's cache."""
    for image, row in zip(source, out):
        row[...] = image
        row *= scale
        row += shift


class HostNormaliser:
    """uint8 NHWC batches → normalised NHWC arrays of `dtype` (`affine`: ImageNet's mean/std, or the
    recipe's), 64-byte aligned.

    The output arrays are handed to a framework that keeps them without copying (TensorFlow,
    XLA on the CPU) and takes a reference while it does: an array is reused only once nothing
    but this object refers to its memory. Fresh 38 MB arrays per batch would cost more in page
    faults than the normalisation itself. A narrower `dtype` (bfloat16) is computed in float32
    and rounded once.
    """

    def __init__(self, dtype: Any = np.float32, affine: Affine = IMAGENET_AFFINE) -> None:
        self.dtype = np.dtype(dtype)
        self._affine = tuple(np.asarray(v, np.float32) for v in affine)
        self._tiled: dict[int, tuple[np.ndarray, np.ndarray]] = {}
        self._owners: list[np.ndarray] = []  # the memory of recent outputs, newest first

    def __call__(self, images: np.ndarray) -> np.ndarray:
        n, h, w, c = images.shape
        out = self._output((n, h, w, c))
        scale, shift = self._tiled_affine(h * w)
        source, flat = images.reshape(n, h * w * c), out.reshape(n, h * w * c)
        if self.dtype == np.float32:
            affine_per_image(source, flat, scale, shift)
        else:
            row = np.empty((1, h * w * c), np.float32)
            for i in range(n):
                affine_per_image(source[i:i + 1], row, scale, shift)
                flat[i] = row[0]
        return out

    def _tiled_affine(self, pixels: int) -> tuple[np.ndarray, np.ndarray]:
        """Scale and shift repeated over a whole image, so numpy runs on long rows."""
        if pixels not in self._tiled:
            self._tiled[pixels] = tuple(np.tile(v, pixels) for v in self._affine)
        return self._tiled[pixels]

    def _output(self, shape: tuple[int, ...]) -> np.ndarray:
        """An aligned array of `shape`: in memory nobody else holds any more, if there is some."""
        nbytes = int(np.prod(shape)) * self.dtype.itemsize
        for owner in self._owners:
            # references when free: the list, this loop's variable and getrefcount's argument
            if owner.nbytes == nbytes + ALIGN and sys.getrefcount(owner) <= 3:
                return _aligned_view(owner, shape, self.dtype)
        owner = np.empty(nbytes + ALIGN, np.uint8)
        self._owners = [owner, *self._owners[:KEEP - 1]]
        return _aligned_view(owner, shape, self.dtype)


def _aligned_view(owner: np.ndarray, shape: tuple[int, ...], dtype: np.dtype) -> np.ndarray:
    """`owner`'s bytes from the first `ALIGN`-aligned address on, as an array of `shape` and `dtype`."""
    start = -owner.ctypes.data % ALIGN
    nbytes = int(np.prod(shape)) * dtype.itemsize
    return owner[start:start + nbytes].view(dtype).reshape(shape)
