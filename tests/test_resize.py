"""Crop + resize + flip into a slot: OpenCV for enlarging crops, the antialiased kernel otherwise."""
from __future__ import annotations

import numpy as np
import pytest

from helpers.images import smooth_rgb
from iofeed.image import resize
from iofeed.image.resize import crop_resize, crop_resize_into

ENLARGING = [(10.0, 20.0, 160.0, 200.0), (50.0, 30.0, 130.0, 110.0), (3.0, 7.0, 200.0, 219.0), (0.0, 0.0, 40.0, 224.0)]
SHRINKING = [(0.0, 0.0, 300.0, 256.0), (20.0, 10.0, 280.0, 200.0), (5.0, 0.0, 100.0, 250.0)]


@pytest.fixture(scope="module")
def photo() -> np.ndarray:
    pixels = np.asarray(smooth_rgb(300, 256, seed=4)).copy()
    pixels.setflags(write=False)  # like a memory-mapped raw shard
    return pixels


def _into(pixels: np.ndarray, box, flip: bool, side: int = 224) -> np.ndarray:
    out = np.full((side, side, 3), 7, np.uint8)
    crop_resize_into(pixels, box, flip, out)
    return out


@pytest.mark.opencv
@pytest.mark.parametrize("box", ENLARGING)
@pytest.mark.parametrize("flip", [False, True])
def test_enlarging_crops_match_the_antialiased_kernel(photo, box, flip):
    """OpenCV's bilinear and antialiased bilinear are one filter when enlarging: within rounding."""
    assert resize._cv2() is not None
    fast = _into(photo, box, flip).astype(int)
    reference = crop_resize(photo, box, flip, (224, 224)).astype(int)
    assert np.abs(fast - reference).max() <= 1
    assert np.abs(fast - reference).mean() < 0.5


@pytest.mark.parametrize("box", ENLARGING + SHRINKING)
def test_flip_is_the_exact_mirror(photo, box):
    assert np.array_equal(_into(photo, box, True), _into(photo, box, False)[:, ::-1])


@pytest.mark.parametrize("box", SHRINKING)
def test_shrinking_crops_take_the_antialiased_kernel(photo, box):
    assert np.array_equal(_into(photo, box, False), crop_resize(photo, box, False, (224, 224)))


def test_shrinking_a_fine_pattern_stays_antialiased():
    """A 1-pixel checkerboard shrunk 1.5x is a flat grey when antialiased; plain bilinear aliases it."""
    y, x = np.mgrid[:336, :336]
    checker = np.repeat(((x + y) % 2 * 255).astype(np.uint8)[..., None], 3, axis=2)
    out = _into(checker, (0.0, 0.0, 336.0, 336.0), False)
    assert abs(out.mean() - 127.5) < 2 and out[8:-8, 8:-8].std() < 20


def test_non_contiguous_output_is_written(photo):
    """A strided slot (which OpenCV would not write into) gets the antialiased kernel's pixels."""
    wide = np.zeros((224, 448, 3), np.uint8)
    crop_resize_into(photo, ENLARGING[0], True, wide[:, ::2])
    assert np.array_equal(wide[:, ::2], crop_resize(photo, ENLARGING[0], True, (224, 224)))
    assert not wide[:, 1::2].any()


@pytest.mark.opencv
def test_same_pixels_without_opencv(photo, monkeypatch):
    with_opencv = [_into(photo, box, flip).astype(int) for box in ENLARGING + SHRINKING for flip in (False, True)]
    monkeypatch.setattr(resize, "_cv2", lambda: None)
    without = [_into(photo, box, flip).astype(int) for box in ENLARGING + SHRINKING for flip in (False, True)]
    assert all(np.abs(a - b).max() <= 1 for a, b in zip(with_opencv, without, strict=True))
