"""One pixel limit everywhere (issue 22.13, 22.17): preprocess refuses a huge image, and so does the
loader reading it from a folder, as a counted "too many pixels" skip; Pillow prints no warning."""
from __future__ import annotations

import struct
import warnings

import pytest

import iofeed
from helpers.images import jpeg_bytes, make_colour_tree, smooth_rgb
from iofeed.errors import SampleError
from iofeed.format.policy import ImagePolicy
from iofeed.image.pil import MAX_PIXELS, check_pixels, open_rgb
from iofeed.prepare.file import prepare_file


def _claiming(data: bytes, width: int, height: int) -> bytes:
    """`data` (a baseline JPEG) with its frame header claiming `width` x `height`."""
    at = data.index(b"\xff\xc0")
    return data[:at + 5] + struct.pack(">HH", height, width) + data[at + 9:]


@pytest.mark.parametrize("side", [20_000, 10_000])  # 400 MP (above Pillow's error), 100 MP (its warning)
def test_a_huge_jpeg_is_too_many_pixels_without_a_warning(tmp_path, side):
    huge = _claiming(jpeg_bytes(smooth_rgb(64, 48, 1)), side, side)
    assert side * side > MAX_PIXELS
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        with pytest.raises(SampleError, match="too many pixels"):
            open_rgb(huge)
        (tmp_path / "huge.jpg").write_bytes(huge)
        assert prepare_file(0, str(tmp_path / "huge.jpg"), ImagePolicy()).reason.startswith("too many pixels")
    assert not seen, [str(w.message) for w in seen]


def test_the_loader_skips_a_huge_folder_image_as_too_many_pixels(tmp_path):
    root = make_colour_tree(tmp_path / "t", per_class=6)
    good = (root / "001.colour0" / "0000.jpg").read_bytes()
    (root / "001.colour0" / "zz_huge.jpg").write_bytes(_claiming(good, 20_000, 20_000))
    with iofeed.loader(root, batch_size=5, workers=1, drop_last=False, split="val",
                       skips=iofeed.Skips(max_skipped=0.1)) as ld:
        delivered = sum(len(labels) for _, labels in ld)
        assert delivered == 24 and ld.stats.skipped["too many pixels"] == 1, "each readable image once"
        assert ld.stats.refilled == 0, "an evaluation split scores no spare twice"
        assert "zz_huge.jpg" in ld.stats.skipped_examples[0]


def test_the_limit_is_pillows_warning_threshold():
    check_pixels(9459, 9459)  # 89,473,681: allowed
    with pytest.raises(SampleError, match="9460x9460 = 89,491,600, the limit is 89,478,485"):
        check_pixels(9460, 9460)
