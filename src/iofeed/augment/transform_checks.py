"""What your transforms must return, checked with messages that name the fix: a sample
transform one image, HWC with 3 channels (CHW, RGBA and greyscale are named as such); a batch
transform `(images, labels)` of the batch's length."""
from __future__ import annotations

import sys
from dataclasses import dataclass
from typing import Any

import numpy as np


@dataclass(frozen=True)
class TransformedImage:
    """The fixed shape (H, W, C) and dtype every output of a sample transform has."""

    shape: tuple[int, ...]
    dtype: np.dtype


def torch_shape(value: Any) -> tuple[int, ...] | None:
    """A torch tensor's own shape (CHW for an image), None for anything else."""
    torch = sys.modules.get("torch")
    return tuple(value.shape) if torch is not None and isinstance(value, torch.Tensor) else None


def layout_problem(raw: tuple[int, ...] | None, shape: tuple[int, ...]) -> tuple[str, str] | None:
    """What is wrong with an output of HWC `shape` (`raw`: a torch tensor's own CHW shape), and the
    fix: three channels, last, is the one layout every adapter and normalisation takes."""
    if len(shape) == 3 and shape[2] == 3:
        return None
    if raw is not None and len(raw) == 3 and raw[-1] == 3:
        return (f"a torch tensor shaped {raw}, which is HWC", "torch tensors are taken as CHW (torchvision's "
                "convention): return CHW (3, H, W), or a numpy array HWC")
    if len(shape) == 3 and shape[0] == 3:
        return f"CHW {shape}", f"return HWC ({shape[1]}, {shape[2]}, 3), e.g. image.transpose(1, 2, 0)"
    if len(shape) not in (2, 3):
        return f"{shape}, not an image", "return one HWC image (H, W, 3)"
    channels = shape[2] if len(shape) == 3 else 1
    kind = {1: "one channel (greyscale)", 4: "4 channels (RGBA?)"}.get(channels, f"{channels} channels")
    return f"{shape}: {kind}", "return 3 channels (RGB), HWC (H, W, 3)"


BATCH_RESULT_FIX = "return (images, labels), one label (row) per image"


def batch_result_problem(out: Any, size: int | None) -> str:
    """What is wrong with a batch transform's result for a batch of `size` samples ('' if nothing):
    it must be (images, labels), both of `size` rows (one label or label row per image, in order;
    the loader's counts, resume and multi-rank batch counts are per sample). `size` None (a traced
    tf function): the form only."""
    batch = f" for a batch of {size}" if size is not None else ""
    if not isinstance(out, (tuple, list)) or len(out) != 2:
        shown = _described(out) if not isinstance(out, (tuple, list)) else f"{len(out)} values"
        return f"{shown}{batch}, not a pair: {BATCH_RESULT_FIX}"
    if len(getattr(out[0], "shape", ())) != 4:
        return f"images {_described(out[0])}{batch}: return a batch of images (N, H, W, C) or (N, C, H, W) first"
    rows = [_rows(part) for part in out] if size is not None else []
    if size is not None and rows != [size, size]:
        labels = "labels without a length" if rows[1] is None else f"{rows[1]} labels"
        return f"{rows[0]} images and {labels}{batch}: {BATCH_RESULT_FIX}, for every image of the batch"
    return ""


def _rows(value: Any) -> int | None:
    """Length along the first axis (None without one)."""
    shape = getattr(value, "shape", None)
    if shape is not None:
        return int(shape[0]) if len(shape) else None
    try:
        return len(value)
    except TypeError:
        return None


def _described(value: Any) -> str:
    """A value as its type and shape, for messages (a batch could be megabytes of repr)."""
    if value is None:
        return "None"
    shape = getattr(value, "shape", None)
    if shape is None:
        return type(value).__name__
    return f"{type(value).__name__} of shape {tuple(None if d is None else int(d) for d in shape)}"
