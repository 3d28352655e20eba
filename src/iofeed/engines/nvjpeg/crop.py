"""Crop, resize and flip of a whole decoded batch where it lies (GPU or CPU), in batched kernels.

The images (of different sizes) are copied into one padded batch with a fourth channel that is 1 on an
image and 0 on its padding; `torchvision.ops.roi_align` cuts and resizes every box in one call
(bilinear with half-pixel centres, as PyTorch's `align_corners=False`; a bin larger than a
pixel averages ceil(bin) x ceil(bin) samples, which antialiases a reduction); dividing the colours
by the fourth channel makes a sample that reaches past an image's last row or column take its
edge (as clamping does) instead of the black padding. Flips are one indexed flip.
"""
from __future__ import annotations

from typing import Any

import torch
from torchvision.ops import roi_align

# Most bytes of float32 padded batch one roi_align call gets: a batch of large images is cut in
# parts (256 images of 256 x 384 px are ~400 MB at once).
MAX_PADDED_BYTES = 1 << 28


def crop_resize_flip(images: list[Any], boxes: Any, flips: Any, side: int) -> Any:
    """(n, side, side, 3) uint8 NHWC from `images` ((3, H, W) uint8 tensors on one device), each
    cut to its row of `boxes` ((n, 4) float: left, top, right, bottom in its pixels), resized to
    `side` x `side` and mirrored where `flips` ((n,) bool, on the host) says."""
    device = images[0].device
    out = torch.empty((len(images), side, side, 3), dtype=torch.uint8, device=device)
    start = 0
    for part in _parts(images):
        rows = slice(start, start + len(part))
        out[rows] = _crop_part(part, boxes[rows].to(device, torch.float32), side)
        start += len(part)
    if bool(flips.any()):  # asked of the host's flags: no wait on the device
        flips = flips.to(device)
        out[flips] = out[flips].flip(2)
    return out


def _parts(images: list[Any]) -> list[list[Any]]:
    """`images` in consecutive parts whose padded float batch stays within MAX_PADDED_BYTES."""
    parts: list[list[Any]] = [[]]
    height = width = 0
    for image in images:
        h, w = max(height, image.shape[1] + 1), max(width, image.shape[2] + 1)
        if parts[-1] and (len(parts[-1]) + 1) * 4 * h * w * 4 > MAX_PADDED_BYTES:
            parts.append([])
            h, w = image.shape[1] + 1, image.shape[2] + 1
        parts[-1].append(image)
        height, width = h, w
    return parts


def _crop_part(images: list[Any], boxes: Any, side: int) -> Any:
    """`crop_resize_flip` of one part, unflipped: (n, side, side, 3) uint8."""
    device, n = images[0].device, len(images)
    height, width = max(image.shape[1] for image in images), max(image.shape[2] for image in images)
    padded = torch.zeros((n, 3, height, width), dtype=torch.uint8, device=device)
    for k, image in enumerate(images):  # a copy each, of uint8 (measured: faster than torch.nested's padding)
        padded[k, :, :image.shape[1], :image.shape[2]] = image
    heights = torch.tensor([image.shape[1] for image in images], device=device)
    widths = torch.tensor([image.shape[2] for image in images], device=device)
    inside = ((torch.arange(height, device=device)[None, :, None] < heights[:, None, None])
              & (torch.arange(width, device=device)[None, None, :] < widths[:, None, None]))
    batch = torch.empty((n, 4, height + 1, width + 1), dtype=torch.float32, device=device)
    batch[:, :, height:, :] = 0  # a row and a column of padding past the largest image, so that its
    batch[:, :, :, width:] = 0  # edge samples are weighed like every other image's
    batch[:, :3, :height, :width] = padded
    batch[:, 3, :height, :width] = inside
    rois = torch.cat([torch.arange(n, device=device, dtype=torch.float32)[:, None], boxes], dim=1)
    cut = roi_align(batch, rois, output_size=(side, side), spatial_scale=1.0, sampling_ratio=-1, aligned=True)
    colours = cut[:, :3] / cut[:, 3:].clamp_min(1e-6)
    return colours.round_().clamp_(0, 255).to(torch.uint8).permute(0, 2, 3, 1)
