"""A timm model's data config (`timm.data.resolve_data_config`'s dict) as an iofeed `Recipe`:
what timm's own eval transform does, checked key by key, refused naming the key where iofeed
does something else."""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..errors import OptionError

INTERPOLATIONS = ("bilinear", "bicubic")  # timm's names that iofeed's resize does the same way
CROP_MODES = ("center",)


def timm_recipe(recipe_type: Any, config: Any) -> Any:
    """`recipe_type(...)` (a `Recipe`) from `config`: image_size from `input_size` (C, H, W) with
    H == W, `interpolation`, `mean`, `std`, `crop_pct` (default 0.875) and `crop_mode` "center"."""
    if not isinstance(config, Mapping):
        raise OptionError(f"Recipe.from_timm needs the dict timm.data.resolve_data_config(model=...) returns, "
                          f"got {type(config).__name__}")
    missing = [k for k in ("input_size", "interpolation", "mean", "std") if k not in config]
    if missing:
        raise OptionError(f"Recipe.from_timm: the data config has no {missing[0]!r} (pass what "
                          "timm.data.resolve_data_config returns)")
    size = tuple(config["input_size"])
    if len(size) != 3 or size[0] != 3 or size[1] != size[2]:
        raise OptionError(f"Recipe.from_timm: input_size={size!r} is not (3, S, S): iofeed makes square RGB images")
    interpolation = config["interpolation"]
    if interpolation not in INTERPOLATIONS:
        raise OptionError(f"Recipe.from_timm: interpolation={interpolation!r} is not one of "
                          f"{', '.join(INTERPOLATIONS)}: set the config's 'interpolation' to 'bicubic' "
                          "(timm's default)")
    mode = config.get("crop_mode", "center")
    if mode not in CROP_MODES:
        raise OptionError(f"Recipe.from_timm: crop_mode={mode!r} is not done by iofeed (its evaluation crop is "
                          "'center': resize the shorter side, then crop the centre)")
    return recipe_type(image_size=int(size[1]), interpolation=interpolation, mean=config["mean"], std=config["std"],
                       crop_fraction=config.get("crop_pct", 0.875))
