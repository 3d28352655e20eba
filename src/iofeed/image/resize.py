"""Crop-and-resize of uint8 RGB pixels into an output slot: antialiased bilinear (or bicubic), with
PyTorch's vectorised kernel when it is installed (several times faster than Pillow on uint8), else
Pillow; "area" with Pillow's box filter.

Enlarging crops (most random-resized crops of 256 px images) take OpenCV's bilinear when it is
installed: when enlarging, antialiased bilinear is plain bilinear, so the filter is the same
(pixels agree within 1, from rounding) and OpenCV computes it about twice as fast."""
from __future__ import annotations

import importlib.util
import warnings
from functools import lru_cache
from typing import Any

import numpy as np
from PIL import Image

from .boxes import Box


@lru_cache(maxsize=1)
def _cv2() -> Any:
    """OpenCV on one thread (workers are already one process per core), or None."""
    if importlib.util.find_spec("cv2") is None:
        return None
    import cv2

    cv2.setNumThreads(1)
    return cv2


@lru_cache(maxsize=1)
def _torch() -> Any:
    """torch with one intra-op thread (workers are already one process per core), or None."""
    if importlib.util.find_spec("torch") is None:
        return None
    import torch

    torch.set_num_threads(1)
    return torch


# Pillow's filter for each interpolation: the fallback without PyTorch, and "area" always (the
# pixel-area average: Pillow's box filter, torchvision's InterpolationMode.BOX)
_PILLOW = {"bilinear": Image.Resampling.BILINEAR, "bicubic": Image.Resampling.BICUBIC, "area": Image.Resampling.BOX}


def crop_resize(pixels: np.ndarray, box: Box, flip: bool, size: tuple[int, int],
                interpolation: str = "bilinear") -> np.ndarray:
    """Cut `box` (left, top, right, bottom) out of `pixels` (H, W, 3 uint8), resize it to `size`
    (height, width) with antialiased `interpolation` ("bilinear", "bicubic": PyTorch's kernels,
    as torchvision v2 on uint8 tensors; "area": Pillow's box filter), flip it horizontally if
    asked: a new (or torch-owned) array."""
    torch = _torch()
    if torch is None or interpolation == "area":
        image = Image.fromarray(pixels).resize(size[::-1], _PILLOW[interpolation], box=box)
        return np.asarray(image.transpose(Image.Transpose.FLIP_LEFT_RIGHT) if flip else image)
    resized = torch.nn.functional.interpolate(
        _crop_tensor(torch, pixels, box), size=size, mode=interpolation, antialias=True, align_corners=False,
    )[0].permute(1, 2, 0)
    out: np.ndarray = (resized.flip(1) if flip else resized).numpy()
    return out


def crop_resize_into(pixels: np.ndarray, box: Box, flip: bool, out: np.ndarray,
                     interpolation: str = "bilinear") -> None:
    """`crop_resize` to `out`'s (height, width), written into `out` (e.g. a shared-memory slot).

    With OpenCV, enlarging bilinear crops are resized by it and every crop is flipped in place by
    it (numpy's in-place mirror of a 224 px image costs 50x more)."""
    if interpolation != "bilinear":
        out[...] = crop_resize(pixels, box, flip, out.shape[:2], interpolation)
        return
    cv2 = _cv2()
    if cv2 is None or not out.flags.c_contiguous:  # OpenCV would write into a new array
        _antialiased_into(pixels, box, flip, out)
        return
    crop = _crop(pixels, box)
    if crop.shape[0] <= out.shape[0] and crop.shape[1] <= out.shape[1]:
        cv2.resize(crop, (out.shape[1], out.shape[0]), dst=out, interpolation=cv2.INTER_LINEAR)
    else:
        _antialiased_into(pixels, box, False, out)
    if flip:
        cv2.flip(out, 1, dst=out)


def _antialiased_into(pixels: np.ndarray, box: Box, flip: bool, out: np.ndarray) -> None:
    """`crop_resize` into `out`. Unflipped with PyTorch, the kernel writes into `out` directly
    (its own output is planar, and the copy to `out`'s interleaved pixels cost a quarter of the time)."""
    resize_out = _resize_out()
    if flip or resize_out is None:
        out[...] = crop_resize(pixels, box, flip, out.shape[:2])
        return
    torch = _torch()
    target = torch.from_numpy(out).permute(2, 0, 1).unsqueeze(0)  # channels_last view of `out`
    resize_out(_crop_tensor(torch, pixels, box), list(out.shape[:2]), False, None, None, out=target)


def _crop(pixels: np.ndarray, box: Box) -> np.ndarray:
    """The pixels of `box`, rounded to whole pixels (a view)."""
    left, top, right, bottom = (int(round(v)) for v in box)
    return pixels[top:bottom, left:right]


def _crop_tensor(torch: Any, pixels: np.ndarray, box: Box) -> Any:
    """`box` of `pixels` as a (1, 3, h, w) uint8 tensor in channels_last memory."""
    with warnings.catch_warnings():  # read-only input (Pillow's buffer, a memory map): only read here
        warnings.simplefilter("ignore", UserWarning)
        crop = torch.from_numpy(_crop(pixels, box)).permute(2, 0, 1).unsqueeze(0)
    return crop.contiguous(memory_format=torch.channels_last)


@lru_cache(maxsize=1)
def _resize_out() -> Any:
    """PyTorch's antialiased bilinear kernel with an `out=` argument, or None."""
    torch = _torch()
    return getattr(getattr(torch.ops.aten, "_upsample_bilinear2d_aa", None), "out", None) if torch else None
