"""The batched JPEG decoder of the `nvjpeg` engine: one call for a whole batch, on a CUDA device
with nvJPEG, or on the CPU with the same library's CPU decode (libjpeg-turbo).

torchcodec's `decoders.decode_jpeg` where it is installed and has it (torchcodec >= 0.17: a list
of byte tensors and `device=`), else torchvision's `io.decode_jpeg` (deprecated since 0.29 in
favour of torchcodec, same nvJPEG batch). A batch call fails whole when one image fails: the
batch is then decoded one image at a time, and an image the decoder refuses goes through the
workers engine's CPU path (simplejpeg, else Pillow); one that fails there too is reported by
its position with the reason.
"""
from __future__ import annotations

import importlib
import importlib.util
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from ...errors import SampleError
from ...image.fastjpeg import decode_rgb_array, plain_jpeg_size
from ...image.pil import open_rgb

BatchDecode = Callable[[list[Any], Any], list[Any]]  # (byte tensors, device) -> (3, H, W) uint8 tensors


def _torchcodec() -> BatchDecode | None:
    """torchcodec's batched JPEG decoder, or None where torchcodec or its image decoder is missing."""
    if importlib.util.find_spec("torchcodec") is None:
        return None
    try:
        decoders = importlib.import_module("torchcodec.decoders")
    except Exception:  # noqa: BLE001 - a torchcodec that does not load (its FFmpeg, its torch) is not there
        return None
    decode = getattr(decoders, "decode_jpeg", None)
    if decode is None:
        return None
    return lambda data, device: decode(list(data), mode="RGB", device=device)


def _torchvision() -> BatchDecode | None:
    if importlib.util.find_spec("torchvision") is None:
        return None
    from torchvision.io import ImageReadMode, decode_jpeg

    def decode(data: list[Any], device: Any) -> list[Any]:
        with warnings.catch_warnings():  # its deprecation in favour of torchcodec, once per call
            warnings.simplefilter("ignore", DeprecationWarning)
            decoded: list[Any] = decode_jpeg(list(data), mode=ImageReadMode.RGB, device=device)  # untyped library
            return decoded

    return decode


# In order of preference; the first whose library is installed decodes.
DECODERS: dict[str, Callable[[], BatchDecode | None]] = {"torchcodec": _torchcodec, "torchvision": _torchvision}


def batch_decoder(prefer: tuple[str, ...] = tuple(DECODERS)) -> tuple[str, BatchDecode]:
    """(name, decode) of the first decoder of `prefer` that is installed; SampleError-free:
    MissingDependencyError when none is."""
    from ...errors import MissingDependencyError

    for name in prefer:
        decode = DECODERS[name]()
        if decode is not None:
            return name, decode
    raise MissingDependencyError("engine='nvjpeg' decodes with torchcodec or torchvision, and neither is installed: "
                                 "run `pip install torchvision` (or torchcodec)")


@dataclass
class Decoded:
    """A batch decoded: each image as a (3, H, W) uint8 tensor on the device, or None with the
    reason it could not be decoded; how many the decoder refused and the CPU decoded."""

    images: list[Any]
    reasons: dict[int, str] = field(default_factory=dict)
    on_cpu: int = 0


def decode_batch(data: list[Any], device: Any, decode: BatchDecode) -> Decoded:
    """`data` (1-D uint8 CPU tensors of JPEG bytes) decoded in one call of `decode`; when that call
    fails, image by image, the decoder's refusals through the CPU path."""
    if not data:
        return Decoded([])
    try:
        return Decoded(list(decode(data, device)))
    except (RuntimeError, ValueError):
        pass
    out = Decoded([])
    for k, one in enumerate(data):
        try:
            out.images.append(decode([one], device)[0])
            continue
        except (RuntimeError, ValueError):
            pass
        try:
            pixels = cpu_pixels(one.numpy().tobytes())
        except SampleError as exc:
            out.images.append(None)
            out.reasons[k] = str(exc)
            continue
        out.images.append(torch.from_numpy(pixels).permute(2, 0, 1).to(device))
        out.on_cpu += 1
    return out


def cpu_pixels(data: bytes) -> np.ndarray:
    """(H, W, 3) uint8 RGB of JPEG `data` at full size, as the workers engine decodes it (simplejpeg
    where it takes the file, else Pillow). Raises SampleError."""
    plain = plain_jpeg_size(data)
    if plain is not None:
        return decode_rgb_array(data, plain)
    return np.asarray(open_rgb(data).image)
