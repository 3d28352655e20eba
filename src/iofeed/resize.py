"""Crop-and-resize of uint8 RGB pixels into an output slot, with PyTorch's vectorised kernel
when it is installed (several times faster than Pillow on uint8), else Pillow."""
from __future__ import annotations

import importlib.util
import warnings
from functools import lru_cache
from typing import Any

import numpy as np
from PIL import Image

from .augment import Box


@lru_cache(maxsize=1)
def _torch() -> Any:
    """torch with one intra-op thread (workers are already one process per core), or None."""
    if importlib.util.find_spec("torch") is None:
        return None
    import torch

    torch.set_num_threads(1)
    return torch


def crop_resize_into(pixels: np.ndarray, box: Box, flip: bool, out: np.ndarray) -> None:
    """Cut `box` (left, top, right, bottom) out of `pixels` (H, W, 3 uint8), resize it to
    `out`'s (side, side) with antialiased bilinear, flip it horizontally if asked, write into `out`."""
    torch = _torch()
    if torch is None:
        image = Image.fromarray(pixels).resize(out.shape[1::-1], Image.Resampling.BILINEAR, box=box)
        if flip:
            image = image.transpose(Image.Transpose.FLIP_LEFT_RIGHT)
        out[...] = np.asarray(image)
        return
    left, top, right, bottom = (int(round(v)) for v in box)
    with warnings.catch_warnings():  # read-only input (Pillow's buffer, a memory map): only read here
        warnings.simplefilter("ignore", UserWarning)
        crop = torch.from_numpy(pixels[top:bottom, left:right]).permute(2, 0, 1).unsqueeze(0)
    resized = torch.nn.functional.interpolate(
        crop.contiguous(memory_format=torch.channels_last), size=out.shape[:2], mode="bilinear",
        antialias=True, align_corners=False,
    )[0].permute(1, 2, 0)
    target = torch.from_numpy(out)
    target.copy_(resized.flip(1) if flip else resized)
