"""`Output(pixels=)`: the scale a training script expects its images on, in one field, resolved
once against the recipe and the framework.

The four scales are what scripts are written for: uint8 as decoded (a GPU or the script
normalises), 0–1 floats (torchvision's `ToTensor`, then the script's own `Normalize`), 0–255
floats (Keras' `image_dataset_from_directory`, models that start with `Rescaling(1/255)`) and
normalised floats (`ToTensor` + `Normalize`). Without `pixels` the recipe decides as before
(`normalize=False` / `augment="uint8"`: uint8; `mean=`/`std=`: normalised), else the framework's
convention. Every adapter takes its affine from this one answer (`adapters/normalize.py`;
docs/decisions/0074).
"""
from __future__ import annotations

from typing import Any

from ..errors import OptionError

UINT8, UNIT, BYTES, NORMALIZED = "uint8", "0-1", "0-255", "normalized"
SCALES = {
    UINT8: "uint8, as decoded",
    UNIT: "float, pixel / 255 (torchvision's ToTensor)",
    BYTES: "float, 0-255 (Keras' image_dataset_from_directory)",
    NORMALIZED: "float, (pixel / 255 - mean) / std: the recipe's mean/std, else ImageNet's",
}
# Each framework's convention when neither `Output.pixels` nor the recipe says: Keras' and tf.data's
# `image_dataset_from_directory` give 0-255 floats, numpy batches are the decoded pixels; torch
# (ToTensor + Normalize) and jax (flax's ImageNet example) normalise with ImageNet's mean/std.
CONVENTIONS = {"keras": BYTES, "tf": BYTES, "numpy": UINT8}


def check_scale(pixels: Any) -> None:
    """OptionError (one line, listing the scales) unless `pixels` is None or one of SCALES."""
    if pixels is not None and (not isinstance(pixels, str) or pixels not in SCALES):
        raise OptionError(f"Output.pixels={pixels!r} is not a scale: one of "
                          + "; ".join(f"{name!r} ({about})" for name, about in SCALES.items()))


def pixel_scale(pixels: Any, recipe: Any, framework: str) -> str:
    """The scale images of `framework` are handed out on: `pixels` when given, else the one the
    `recipe` implies, else the framework's convention. OptionError (one line, naming the fix) for
    a name that is no scale, or one that the recipe or the framework contradicts."""
    if pixels is None:
        if not recipe.normalize:  # framework="keras" gives floats on every backend: the model decides
            return BYTES if framework == "keras" else UINT8
        if recipe.mean is not None:
            return NORMALIZED if framework != "numpy" else UINT8
        return CONVENTIONS.get(framework, NORMALIZED)
    check_scale(pixels)
    if framework == "numpy" and pixels != UINT8:
        raise OptionError(f"Output.pixels={pixels!r} is for the framework adapters: framework='numpy' hands out "
                          "the decoded uint8 pixels (pass framework='torch', 'tf', 'jax' or 'keras', or drop pixels)")
    if framework == "keras" and pixels == UINT8:
        raise OptionError("Output.pixels='uint8': framework='keras' hands out float32 on every backend (the model, "
                          "not the backend, decides the scale): pass Output(pixels='0-255') for the decoded values "
                          "as floats")
    if pixels != NORMALIZED and recipe.mean is not None:
        raise OptionError(f"Output.pixels={pixels!r} takes no mean/std, and the recipe has mean={recipe.mean}, std="
                          f"{recipe.std}: drop them from the Recipe, or pass Output(pixels='normalized')")
    if pixels != UINT8 and not recipe.normalize:
        raise OptionError(f"Output.pixels={pixels!r} is a float scale, and the recipe hands out uint8 (augment='uint8' "
                          "or normalize=False): pass Output(pixels='uint8'), or a recipe that normalises")
    return str(pixels)
