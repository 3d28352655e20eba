"""The libjpeg-turbo path (`simplejpeg`): Pillow's pixels, Pillow's job for what it cannot do."""
from __future__ import annotations

import io

import numpy as np
import pytest
from PIL import Image

from helpers.images import exif_rotated_jpeg, jpeg_bytes, png_bytes, smooth_rgb
from iofeed.engines.workers.decode import decode_augmented
from iofeed.errors import SampleError
from iofeed.image import fastjpeg
from iofeed.image.boxes import Augment

pytest.importorskip("simplejpeg")


def _pillow(data: bytes) -> np.ndarray:
    return np.asarray(Image.open(io.BytesIO(data)).convert("RGB"))


@pytest.mark.parametrize("image, options", [
    (smooth_rgb(300, 200, 1), {}),
    (smooth_rgb(301, 199, 2), {"progressive": True}),
    (smooth_rgb(120, 90, 3).convert("L"), {}),
    (smooth_rgb(64, 64, 4), {"subsampling": 0}),
])
def test_full_size_pixels_are_pillows(image, options):
    data = jpeg_bytes(image, **options)
    assert fastjpeg.plain_jpeg_size(data) == image.size
    assert np.array_equal(fastjpeg.decode_rgb_array(data, (0, 0)), _pillow(data))


def test_dct_scaling_covers_the_minimum():
    data = jpeg_bytes(smooth_rgb(800, 600, 5))
    small = fastjpeg.decode_rgb_array(data, (250, 180))
    assert small.shape[1] >= 250 and small.shape[0] >= 180 and small.shape[1] < 800


@pytest.mark.parametrize("data", [
    exif_rotated_jpeg(smooth_rgb(300, 200, 6), orientation=6),
    exif_rotated_jpeg(smooth_rgb(300, 200, 6), orientation=1),  # any EXIF block: Pillow reads it
    jpeg_bytes(smooth_rgb(100, 80, 7).convert("CMYK")),
    png_bytes(smooth_rgb(50, 40, 8)),
    b"\xff\xd8\xff\xe0garbage",
])
def test_what_pillow_must_handle_is_left_to_it(data):
    assert fastjpeg.plain_jpeg_size(data) is None


def test_truncated_data_raises_sample_error():
    data = jpeg_bytes(smooth_rgb(200, 150, 9))
    with pytest.raises(SampleError, match="corrupt or truncated"):
        fastjpeg.decode_rgb_array(data[: len(data) // 2], (0, 0))


@pytest.mark.parametrize("train", [True, False])
def test_augmented_output_matches_the_pillow_path(monkeypatch, train):
    """Same boxes and flips from the same draws; pixels equal where no DCT scaling is involved."""
    data = jpeg_bytes(smooth_rgb(256, 300, 10))
    outputs = []
    for fast in (True, False):
        if not fast:
            monkeypatch.setattr(fastjpeg, "plain_jpeg_header", lambda _: None)
            monkeypatch.setattr("iofeed.engines.workers.decode.plain_jpeg_header", lambda _: None)
        out = np.empty((224, 224, 3), np.uint8)
        decode_augmented(data, Augment(size=224, train=train), np.random.default_rng(3), out)
        outputs.append(out)
    assert np.array_equal(outputs[0], outputs[1])
