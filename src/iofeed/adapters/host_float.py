"""Batches written on the host in the layout the model asks for, in one pass: uint8 NHWC pixels to
normalised floats (or to uint8 planes) in NHWC or NCHW order, each value written once, where it
belongs. The transpose costs nothing when it is part of the pass that writes."""
from __future__ import annotations

import importlib.util
from functools import cache
from typing import Any

import numpy as np

from .normalize import IMAGENET_AFFINE, Affine
from .output_pool import OutputPool

NHWC, NCHW = "nhwc", "nchw"  # the order of an output's memory: channels last (interleaved), or planes
LUT_DTYPES = frozenset(np.dtype(t) for t in (np.float32, np.float64, np.float16))  # tables cv2.LUT takes


@cache
def _cv2() -> Any:
    """OpenCV (one thread: it runs beside the workers), or None without the fast extra."""
    if importlib.util.find_spec("cv2") is None:
        return None
    import cv2

    cv2.setNumThreads(1)
    return cv2


class HostAffine:
    """x * scale + shift per channel for uint8 x (`affine`), written into `out` of `dtype` in one pass.

    With OpenCV the affine is a lookup table of each channel's 256 values in `dtype` (computed in
    float32 as numpy would, rounded once to `dtype`): `cv2.LUT` writes an interleaved batch in one
    call, and a planar image as its three uint8 planes (split into a small scratch that stays in
    the core's cache) looked up into the output planes. Measured on one core of the 2-core
    machine: 0.12-0.14 ms per 224 px image either way, against 0.14-0.16 for numpy's three passes
    over an interleaved image and 0.26-0.29 for those plus a transposing copy
    (docs/decisions/0081-the-layout-is-written-in-the-normalising-pass.md). Without OpenCV, numpy's
    passes run per image, in the core's cache."""

    def __init__(self, affine: Affine = IMAGENET_AFFINE, dtype: Any = np.float32) -> None:
        self.dtype = np.dtype(dtype)
        self._scale, self._shift = (np.asarray(v, np.float32) for v in affine)
        table = (np.arange(256, dtype=np.float32)[:, None] * self._scale + self._shift).astype(self.dtype)
        self._planes = [np.ascontiguousarray(table[:, c]) for c in range(table.shape[1])]
        self._interleaved = np.ascontiguousarray(table.reshape(1, 256, -1))
        self._tiled: dict[int, tuple[np.ndarray, np.ndarray]] = {}

    def write(self, source: np.ndarray, out: np.ndarray, order: str = NHWC) -> None:
        """`source` uint8 (N, H, W, C) normalised into `out`: (N, H, W, C) for NHWC, (N, C, H, W) for NCHW."""
        cv2 = _cv2()
        if cv2 is None or self.dtype not in LUT_DTYPES or source.shape[-1] != 3 or not (
                out.flags.c_contiguous and source.flags.c_contiguous):
            self._write_numpy(source, out, order)
        elif order == NHWC:
            n, h, w, c = source.shape
            cv2.LUT(source.reshape(n * h, w, c), self._interleaved, dst=out.reshape(n * h, w, c))
        else:
            planes = [np.empty(source.shape[1:3], np.uint8) for _ in range(3)]
            for image, outputs in zip(source, out):
                cv2.split(image, planes)
                for plane, table, output in zip(planes, self._planes, outputs):
                    cv2.LUT(plane, table, dst=output)

    def _write_numpy(self, source: np.ndarray, out: np.ndarray, order: str) -> None:
        """numpy's three passes per image (cast, scale, shift), each image in the core's cache;
        float32 computed, rounded once to `dtype`."""
        direct = self.dtype == np.float32 and out.flags.c_contiguous
        scratch = np.empty(out.shape[1:], np.float32)  # unused when writing straight into `out`
        if order == NHWC:
            scale, shift = self._tiled_affine(source.shape[1] * source.shape[2])
            for image, output in zip(source, out):
                row = (output if direct else scratch).reshape(-1)
                row[...] = image.reshape(-1)
                row *= scale
                row += shift
                if not direct:
                    output[...] = scratch
            return
        scale, shift = self._scale[:, None, None], self._shift[:, None, None]
        for image, output in zip(source, out):
            planes = output if direct else scratch
            planes[...] = image.transpose(2, 0, 1)
            planes *= scale
            planes += shift
            if not direct:
                output[...] = planes

    def _tiled_affine(self, pixels: int) -> tuple[np.ndarray, np.ndarray]:
        """Scale and shift repeated over a whole image, so numpy runs on long rows."""
        if pixels not in self._tiled:
            self._tiled[pixels] = (np.tile(self._scale, pixels), np.tile(self._shift, pixels))
        return self._tiled[pixels]


def write_uint8(source: np.ndarray, out: np.ndarray, order: str = NHWC) -> None:
    """`source` uint8 (N, H, W, C) copied into `out` in `order`, in one pass (OpenCV splits planes)."""
    cv2 = _cv2()
    if order == NHWC:
        out[...] = source
    elif cv2 is not None and source.flags.c_contiguous and out.flags.c_contiguous and source.shape[-1] == 3:
        for image, planes in zip(source, out):
            cv2.split(image, list(planes))
    else:
        out[...] = source.transpose(0, 3, 1, 2)


class HostNormaliser:
    """uint8 NHWC batches → normalised NHWC arrays of `dtype` (`affine`: ImageNet's mean/std, or the
    recipe's), 64-byte aligned, each lent from an `OutputPool`.

    The output arrays are handed to a framework that keeps them without copying (TensorFlow,
    XLA on the CPU, torch tensors over them): an array's memory is reused only once its lease is
    released, when nothing refers to it any more."""

    def __init__(self, dtype: Any = np.float32, affine: Affine = IMAGENET_AFFINE) -> None:
        self.dtype = np.dtype(dtype)
        self._affine = HostAffine(affine, self.dtype)
        self.pool = OutputPool()

    def __call__(self, images: np.ndarray) -> np.ndarray:
        out = self.pool.array(images.shape, self.dtype)
        self._affine.write(images, out, NHWC)
        return out
