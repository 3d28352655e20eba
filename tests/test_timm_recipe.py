"""`Recipe.from_timm`: a timm model's data config (the dict `timm.data.resolve_data_config`
returns; timm need not be installed) as the loader's recipe — input size, interpolation,
mean/std, crop_pct — and one line naming the key iofeed cannot follow."""
from __future__ import annotations

import numpy as np
import pytest

import iofeed
from iofeed.errors import OptionError

# what timm 1.0's resolve_data_config returns for e.g. a ViT at 48 px (small, for the test)
CONFIG = {"input_size": (3, 48, 48), "interpolation": "bicubic", "mean": (0.5, 0.5, 0.5), "std": (0.5, 0.5, 0.5),
          "crop_pct": 0.9, "crop_mode": "center"}


def test_a_timm_data_config_becomes_the_recipe():
    recipe = iofeed.Recipe.from_timm(CONFIG)
    assert (recipe.image_size, recipe.interpolation, recipe.mean, recipe.std, recipe.crop_fraction) == \
        (48, "bicubic", (0.5, 0.5, 0.5), (0.5, 0.5, 0.5), 0.9)
    assert (recipe.scale, recipe.ratio, recipe.flip) == ((0.08, 1.0), (3 / 4, 4 / 3), True), "timm's train crop"
    assert iofeed.Recipe.from_timm(CONFIG, scale=(0.35, 1.0)).scale == (0.35, 1.0)


@pytest.mark.torch
def test_the_loader_takes_size_and_normalisation_from_it(colour_dataset):
    recipe = iofeed.Recipe.from_timm(CONFIG)
    options = {"split": "val", "batch_size": 4, "workers": 1}
    with iofeed.loader(colour_dataset, augment=iofeed.Recipe.from_timm(CONFIG, normalize=False), **options) as raw:
        uint8 = np.array(next(iter(raw))[0])
    with iofeed.loader(colour_dataset, augment=recipe, framework="torch", **options) as ld:
        images, _ = next(iter(ld))
        assert ld.image_size == 48
    assert images.shape == (4, 3, 48, 48) and uint8.shape == (4, 48, 48, 3)
    expected = (uint8.transpose(0, 3, 1, 2) / 255.0 - 0.5) / 0.5
    np.testing.assert_allclose(images.numpy(), expected, atol=1e-5)


@pytest.mark.parametrize(("change", "word"), [
    ({"input_size": (3, 224, 160)}, "input_size"),
    ({"interpolation": "nearest"}, "interpolation"),
    ({"crop_mode": "squash"}, "crop_mode"),
    ({"mean": None}, "mean"),
])
def test_what_iofeed_does_otherwise_is_refused_naming_the_key(change, word):
    with pytest.raises(OptionError, match=word) as info:
        iofeed.Recipe.from_timm({**CONFIG, **change})
    assert "\n" not in str(info.value)


def test_an_image_size_that_disagrees_with_the_model_is_refused(colour_dataset):
    with pytest.raises(OptionError, match="image_size=64 disagrees"):
        iofeed.loader(colour_dataset, batch_size=4, image_size=64, augment=iofeed.Recipe.from_timm(CONFIG))
