"""`pixels=`: the scale a script expects, in one keyword, the same on every framework adapter
(issue 38: a torch script that normalised its own input got iofeed's normalisation first, and the
only way out was `augment=iofeed.Recipe(mean=(0, 0, 0), std=(1, 1, 1))` on both loaders)."""
from __future__ import annotations

import numpy as np
import pytest

import iofeed
from iofeed.errors import OptionError

SIZE = 32
IMAGENET_MEAN, IMAGENET_STD = np.array([0.485, 0.456, 0.406]), np.array([0.229, 0.224, 0.225])
EXPECTED = {  # the stored pixels p (uint8, NHWC) -> what each scale hands out
    "uint8": lambda p: p,
    "0-1": lambda p: p / 255.0,
    "0-255": lambda p: p.astype(np.float64),
    "normalized": lambda p: (p / 255.0 - IMAGENET_MEAN) / IMAGENET_STD,
}


def _stored(dataset) -> np.ndarray:
    with iofeed.loader(dataset, split="val", batch_size=8, image_size=SIZE, workers=1) as ld:
        return np.asarray(next(iter(ld))[0])


def _first_nhwc(dataset, framework: str, pixels: str) -> np.ndarray:
    data = iofeed.loader(dataset, split="val", batch_size=8, image_size=SIZE, framework=framework,
                         output=iofeed.Output(pixels=pixels),
                         workers=1)
    loader = getattr(data, "iofeed_loader", data)
    with loader:
        images = next(iter(data))[0]
        images = images.numpy() if hasattr(images, "numpy") else np.asarray(images)
    return images.transpose(0, 2, 3, 1) if framework == "torch" else images


@pytest.mark.parametrize("framework", [pytest.param("torch", marks=pytest.mark.torch),
                                       pytest.param("tf", marks=pytest.mark.tf),
                                       pytest.param("jax", marks=pytest.mark.jax)])
def test_each_scale_hands_out_the_stored_pixels_on_it(colour_dataset, framework):
    stored = _stored(colour_dataset)
    for pixels, expected in EXPECTED.items():
        images = _first_nhwc(colour_dataset, framework, pixels)
        assert (images.dtype == np.uint8) == (pixels == "uint8"), (pixels, images.dtype)
        np.testing.assert_allclose(images.astype(np.float64), expected(stored), rtol=1e-5, atol=1e-5,
                                   err_msg=f"{framework} pixels={pixels!r}")


@pytest.mark.torch
def test_the_default_is_each_frameworks_convention_and_the_recipe_still_decides(colour_dataset):
    from iofeed.options.loader_options import LoaderOptions

    scales = {fw: LoaderOptions(batch_size=4, framework=fw).pixel_scale for fw in ("numpy", "torch", "jax", "tf",
                                                                                     "keras")}
    assert scales == {"numpy": "uint8", "torch": "normalized", "jax": "normalized", "tf": "0-255",
                      "keras": "0-255"}
    assert LoaderOptions(batch_size=4, framework="torch", augment="uint8").pixel_scale == "uint8"
    assert LoaderOptions(batch_size=4, framework="keras", augment="uint8").pixel_scale == "0-255"
    inception = LoaderOptions(batch_size=4, framework="tf", augment="inception")
    assert inception.pixel_scale == "normalized"
    images = _first_nhwc(colour_dataset, "torch", "normalized")  # pixels= beside a recipe's mean/std: theirs
    with iofeed.loader(colour_dataset, split="val", batch_size=8, image_size=SIZE, framework="torch",
                       augment=iofeed.Recipe(mean=(0.5,) * 3, std=(0.5,) * 3),
                       output=iofeed.Output(pixels="normalized"), workers=1) as ld:
        half = next(iter(ld))[0].numpy().transpose(0, 2, 3, 1)
    np.testing.assert_allclose(half, (_stored(colour_dataset) / 255.0 - 0.5) / 0.5, atol=1e-5)
    assert not np.allclose(images, half)


@pytest.mark.parametrize(("output", "keywords", "message"), [
    ({"pixels": "unit"}, {}, r"pixels='unit' is not a scale: one of 'uint8' .*'0-1' .*'0-255' .*'normalized'"),
    ({"pixels": 255}, {}, r"pixels=255 is not a scale"),
    ({"pixels": "0-1"}, {"augment": iofeed.Recipe(mean=(0.5,) * 3, std=(0.5,) * 3)},
     r"pixels='0-1' takes no mean/std.*pass Output\(pixels='normalized'\)"),
    ({"pixels": "normalized"}, {"augment": "uint8"},
     r"pixels='normalized' is a float scale.*pass Output\(pixels='uint8'\)"),
    ({"pixels": "0-1"}, {"framework": "numpy"}, r"framework='numpy' hands out the decoded uint8"),
    ({"pixels": "uint8"}, {"framework": "keras"}, r"framework='keras' hands out float32.*pixels='0-255'"),
    ({"pixels": "uint8", "dtype": "bfloat16"}, {"framework": "jax"}, r"dtype='bfloat16'.*pixels='uint8'"),
])
def test_a_scale_the_recipe_or_framework_contradicts_is_refused_in_one_line(output, keywords, message):
    from iofeed.options.loader_options import LoaderOptions

    options = {"batch_size": 4, "framework": "torch", **keywords}
    with pytest.raises(OptionError, match=message) as info:
        LoaderOptions(**options, output=iofeed.Output(**output))
    assert "\n" not in str(info.value)


def test_the_readme_section_on_changing_a_script_names_the_keyword():
    from pathlib import Path

    readme = (Path(__file__).resolve().parents[1] / "README.md").read_text(encoding="utf-8")
    section = readme.split("### Changing your script", 1)[1].split("\n## ", 1)[0]
    for scale in ('"uint8"', '"0-1"', '"0-255"', '"normalized"'):
        assert f"pixels={scale}" in section or scale in section, scale
    assert "pixels=" in section and "ToTensor" in section
