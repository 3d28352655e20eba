"""Region decode (`image/region.py`): a crop's pixels exactly as the full decode gives them, taken
only where it pays, and the full decode, with the reason in the stats, where it cannot run."""
from __future__ import annotations

import numpy as np
import pytest

import iofeed
from helpers.images import jpeg_bytes, smooth_rgb
from iofeed.engines.workers import decode
from iofeed.engines.workers.decode import decode_augmented
from iofeed.errors import OptionError
from iofeed.image import fastjpeg, region
from iofeed.image.boxes import Augment

pytest.importorskip("simplejpeg")

# odd sizes: the right and bottom MCUs are partial
BOXES = [(0, 0, 40, 30), (17, 23, 101, 88), (290, 200, 333, 257), (1, 1, 332, 256), (100, 0, 101, 257),
         (5, 250, 60, 257)]


@pytest.mark.region
@pytest.mark.parametrize("subsampling, grey", [(2, False), (1, False), (0, False), (-1, True)])
def test_region_pixels_are_the_full_decodes(subsampling, grey):
    picture = smooth_rgb(333, 257, seed=subsampling + 5)
    data = jpeg_bytes(picture.convert("L") if grey else picture, **({} if grey else {"subsampling": subsampling}))
    width, height, sampling = fastjpeg.plain_jpeg_header(data)
    assert sampling in region.MCU
    full = fastjpeg.decode_rgb_array(data, (0, 0))
    for box in BOXES:
        got = region.decode_region(data, box, (width, height), sampling)
        assert np.array_equal(got, full[box[1]:box[3], box[0]:box[2]]), (sampling, box)


@pytest.mark.region
def test_small_crops_take_the_region_and_give_the_same_pixels(monkeypatch):
    """Same draws, same pixels with the region path allowed or not; it is taken for the small
    crops only (a crop over MAX_SHARE of the image decodes whole)."""
    taken = []
    original = region.decode_region
    monkeypatch.setattr(region, "decode_region", lambda *a: taken.append(a[1]) or original(*a))
    data = jpeg_bytes(smooth_rgb(341, 256, seed=11))
    for seed in range(40):
        outputs = []
        for allowed in (True, False):
            out = np.empty((224, 224, 3), np.uint8)
            decode_augmented(data, Augment(size=224, region_decode=True), np.random.default_rng(seed), out,
                             region_ok=allowed)
            outputs.append(out)
        assert np.array_equal(*outputs), seed
    assert 0 < len(taken) < 40
    for left, top, right, bottom in taken:
        assert (right - left) * (bottom - top) <= region.MAX_SHARE * 341 * 256


def test_without_the_extra_the_full_decode_runs(monkeypatch):
    monkeypatch.setattr(region, "installed", lambda: False)
    monkeypatch.setattr(region, "_codec", lambda: None)
    data = jpeg_bytes(smooth_rgb(341, 256, seed=12))
    assert region.decode_region(data, (0, 0, 20, 20), (341, 256), "420") is None
    outputs = []
    for allowed in (True, False):
        out = np.empty((224, 224, 3), np.uint8)
        decode_augmented(data, Augment(size=224, region_decode=True), np.random.default_rng(4), out,
                         region_ok=allowed)
        outputs.append(out)
    assert np.array_equal(*outputs)


def _decode_notes(source, **keywords) -> list[str]:
    with iofeed.loader(source, batch_size=4, image_size=224, workers=1, framework="numpy", **keywords) as ld:
        return [d for d in ld.stats.settings["decisions"] if isinstance(d, str) and d.startswith("decode:")]


def test_region_decode_is_off_unless_the_recipe_asks(monkeypatch):
    taken = []
    monkeypatch.setattr(region, "decode_region", lambda *a: taken.append(a) or None)
    data = jpeg_bytes(smooth_rgb(341, 256, seed=14))
    for seed in range(20):
        decode_augmented(data, Augment(size=224), np.random.default_rng(seed), np.empty((224, 224, 3), np.uint8),
                         region_ok=True)
    assert taken == []


def test_decisions_say_which_decode_runs_and_why(colour_dataset, colour_tree, monkeypatch):
    (default,) = _decode_notes(colour_dataset)
    assert "the full image" in default and "fastdct + fastupsample: Recipe(fast_decode=True), the default" in default
    assert "Recipe(region_decode=True) would decode" in default, default
    (exact,) = _decode_notes(colour_dataset, augment=iofeed.Recipe(fast_decode=False))
    assert "exact IDCT and upsampling: Recipe(fast_decode=False)" in exact, exact
    asked = iofeed.Recipe(region_decode=True)
    (note,) = _decode_notes(colour_dataset, augment=asked)
    if region.installed():
        assert note.startswith("decode: only the crop's region") and "35%" in note, note
    else:
        assert "the full image" in note and "pip install 'iofeed[region]'" in note, note
    (folder,) = _decode_notes(colour_tree, augment=asked)
    assert "the full image" in folder and "not checked whole" in folder, folder
    monkeypatch.setattr(region, "installed", lambda: False)  # the consumer writes the note: the extra "missing"
    (missing,) = _decode_notes(colour_dataset, augment=asked)
    assert "the full image" in missing and "pip install 'iofeed[region]'" in missing, missing


def test_only_images_checked_whole_may_take_the_region(colour_dataset, colour_tree):
    """A region decode stops at the crop: a file truncated below it would be delivered, so folders
    (never decoded whole before loading) always decode whole."""
    from iofeed.sources.samples import open_source

    assert decode.checked_whole(open_source(colour_dataset, "train"))
    assert not decode.checked_whole(open_source(colour_tree, "train"))


def test_fast_decode_reaches_the_decoder_and_stays_close():
    data = jpeg_bytes(smooth_rgb(341, 256, seed=13))
    outputs = []
    for fast in (False, True):
        out = np.empty((224, 224, 3), np.uint8)
        decode_augmented(data, Augment(size=224, fast_decode=fast), np.random.default_rng(5), out)
        outputs.append(out.astype(np.int16))
    difference = np.abs(outputs[0] - outputs[1])
    assert difference.max() > 0, "fast_decode changed nothing: the option did not reach libjpeg-turbo"
    assert difference.mean() < 2.0, difference.mean()  # 1.0 here (noisy picture); 0.9 on real photos


@pytest.mark.parametrize("name", ["fast_decode", "region_decode"])
def test_decode_choices_must_be_bools(name):
    assert iofeed.Recipe().fast_decode and not iofeed.Recipe().region_decode  # the defaults
    with pytest.raises(OptionError, match=f"{name} must be True or False"):
        iofeed.Recipe(**{name: "yes"})
