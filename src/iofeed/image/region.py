"""Region decode: only the rows and columns a crop needs, through NVIDIA nvImageCodec's CPU
decoder (its bundled libjpeg-turbo honours a `Region` without a GPU), when the `region` extra
is installed; otherwise the caller decodes the whole image.

A region decoded on its own differs from the same pixels of a full decode at its edges (chroma
upsampling and the IDCT read neighbouring blocks), so the box is grown by one MCU on each side
(clipped to the image), decoded, and trimmed: the pixels are a full decode's.

Why nvImageCodec, why it is off unless `Recipe(region_decode=True)` asks (measured no faster than
simplejpeg's full decode on 256 px images), and when a region pays: docs/decisions/0090-region-decode.md.
"""
from __future__ import annotations

import importlib
import importlib.util
import os
from functools import lru_cache
from typing import Any

import numpy as np

from ..errors import SampleError

MODULE = "nvidia.nvimgcodec"
EXTRA = "region"
# A region is decoded only when the grown box covers at most this share of the image: above it the
# decoder's per-call cost outweighs the rows and columns saved (measured, docs/decisions/0090).
MAX_SHARE = 0.35
# (width, height) of an MCU for each chroma subsampling `simplejpeg.decode_jpeg_header` names
MCU = {"444": (8, 8), "422": (16, 8), "420": (16, 16), "440": (8, 16), "411": (32, 8), "Gray": (8, 8)}


@lru_cache(maxsize=1)
def _codec() -> tuple[Any, Any, Any] | None:
    """(module, CPU decoder on one thread, decode params) or None when the extra is missing.
    The library prints a line per absent GPU codec (nvJPEG, ...) while it loads: silenced here."""
    if not installed():
        return None
    with _quiet_stderr():
        nv = importlib.import_module(MODULE)
        decoder = nv.Decoder(device_id=nv.NVIMGCODEC_DEVICE_CPU_ONLY, max_num_cpu_threads=1,
                             backends=[nv.Backend(nv.BackendKind.CPU_ONLY)])
    params = nv.DecodeParams(apply_exif_orientation=False, color_spec=nv.SRGB)
    return nv, decoder, params


def installed() -> bool:
    """Whether the `region` extra (nvImageCodec) can be imported, without importing it."""
    try:
        return importlib.util.find_spec(MODULE) is not None
    except (ImportError, ValueError):
        return False


def worth_it(box: tuple[int, int, int, int], size: tuple[int, int], subsampling: str) -> bool:
    """Whether decoding only `box` (left, top, right, bottom) of an image of `size` (width,
    height) is cheaper than the full decode: a known subsampling, and the grown box at most
    MAX_SHARE of the image."""
    if subsampling not in MCU:
        return False
    left, top, right, bottom = grown(box, size, subsampling)
    return (right - left) * (bottom - top) <= MAX_SHARE * size[0] * size[1]


def grown(box: tuple[int, int, int, int], size: tuple[int, int], subsampling: str) -> tuple[int, int, int, int]:
    """`box` grown by one MCU on each side, clipped to the image."""
    mcu_w, mcu_h = MCU[subsampling]
    left, top, right, bottom = box
    return max(0, left - mcu_w), max(0, top - mcu_h), min(size[0], right + mcu_w), min(size[1], bottom + mcu_h)


def decode_region(data: bytes, box: tuple[int, int, int, int], size: tuple[int, int],
                  subsampling: str) -> np.ndarray | None:
    """The RGB pixels of `box` (whole pixels, inside the image), as a full decode gives them, or
    None when the extra is missing. Raises SampleError when the decoder cannot read `data`."""
    codec = _codec()
    if codec is None:
        return None
    nv, decoder, params = codec
    left, top, right, bottom = grown(box, size, subsampling)
    stream = nv.CodeStream(data).get_sub_code_stream(region=nv.Region(top, left, bottom, right))
    image = decoder.decode(stream, params=params)
    if image is None:
        raise SampleError("corrupt or truncated image (nvImageCodec could not decode it)")
    pixels = np.asarray(image.cpu())
    if pixels.shape[:2] != (bottom - top, right - left):
        raise SampleError(f"corrupt image: a {right - left}x{bottom - top} region decoded as "
                          f"{pixels.shape[1]}x{pixels.shape[0]}")
    return pixels[box[1] - top:box[3] - top, box[0] - left:box[2] - left]


def describe(asked: bool, validated: bool, fast: bool) -> str:
    """Which JPEG decode the workers run, and why, for `stats.settings["decisions"]`: `asked`,
    `Recipe(region_decode=)`; `validated`, whether every image was checked whole by `iofeed
    preprocess`; `fast`, `Recipe(fast_decode=)`."""
    idct = ("fastdct + fastupsample: Recipe(fast_decode=True), the default" if fast
            else "exact IDCT and upsampling: Recipe(fast_decode=False)")
    full = f"the full image (libjpeg-turbo through simplejpeg, {idct})"
    if not asked:
        return (f"decode: {full}; Recipe(region_decode=True) would decode only small crops' regions "
                f"({MODULE}), measured no faster on 256 px images (docs/decisions/0090-region-decode.md)")
    if not installed():
        return f"decode: {full}; Recipe(region_decode=True) needs {MODULE}: pip install 'iofeed[{EXTRA}]'"
    if not validated:
        return (f"decode: {full}; no region decode: images not checked whole by iofeed preprocess, and a region "
                "decode would not notice damage below the crop (a truncated file would be delivered, not skipped)")
    return (f"decode: only the crop's region ({MODULE}, CPU, exact) when the box grown by one MCU is at most "
            f"{MAX_SHARE:.0%} of the image (Recipe(region_decode=True)), else {full}")


class _quiet_stderr:
    """File descriptor 2 pointed at /dev/null for the block (C libraries print there directly)."""

    def __enter__(self) -> None:
        self._saved = os.dup(2)
        null = os.open(os.devnull, os.O_WRONLY)
        os.dup2(null, 2)
        os.close(null)

    def __exit__(self, *exc: object) -> None:
        os.dup2(self._saved, 2)
        os.close(self._saved)
