"""timm's `train.py` flags as iofeed loader keywords (`iofeed.from_timm_args`): once the loader is
iofeed, `--aa`, `--reprob`, `--scale`... keep their meaning, or are refused naming the flag.

What timm's `create_loader` did with them, step by step: the random-resized crop and flip
(`--scale`, `--ratio`, `--hflip`, `--train-interpolation`) become the `Recipe`; the steps between
the crop and the tensor (`--aa`, `--color-jitter`, `--grayscale-prob`, `--gaussian-blur-prob`)
are timm's own objects, built by timm's `transforms_imagenet_train`, run as `transform=` in the
workers; random erasing (`--reprob`, `--remode`, `--recount`) on the normalised batch as
`batch_transform=`. `--mixup`/`--cutmix` stay with train.py's `mixup_fn` (made without the
prefetcher). The model's size, mean/std, crop_pct and interpolation come from its data config. (docs/decisions/0075)
"""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from ..errors import OptionError
from .recipe import Recipe
from .script_steps import OnImagesDevice, loader_keywords

# train.py's defaults (timm 1.0), for a Namespace made by another parser that lacks a flag
DEFAULTS: dict[str, Any] = {
    "no_aug": False, "scale": (0.08, 1.0), "ratio": (3 / 4, 4 / 3), "hflip": 0.5, "vflip": 0.0,
    "color_jitter": 0.4, "color_jitter_prob": None, "grayscale_prob": 0.0, "gaussian_blur_prob": 0.0, "aa": None,
    "aug_repeats": 0, "aug_splits": 0, "reprob": 0.0, "remode": "pixel", "recount": 1, "resplit": False,
    "mixup": 0.0, "cutmix": 0.0, "cutmix_minmax": None, "train_interpolation": "random", "train_crop_mode": None,
    "interpolation": "", "crop_pct": None, "mean": None, "std": None,
}


def from_timm_args(args: Any, data_config: Mapping[str, Any], split: str = "train") -> dict[str, Any]:
    """The `iofeed.loader` keywords (`augment=`, and `transform=` / `batch_transform=` when the
    flags ask for them) that do what timm's `create_loader` does for `split` with the script's
    parsed `args` and the model's `data_config` (`timm.data.resolve_data_config(vars(args),
    model=model)`). OptionError naming the flag for what iofeed cannot do the same way."""
    config = _config(args, data_config)
    if split != "train":
        return {"augment": Recipe.from_timm(config)}
    if _flag(args, "no_aug"):  # timm's transforms_noaug_train: resize the shorter side, centre crop, no crop
        return {"augment": replace(Recipe.from_timm(config), train=False, crop_fraction=1.0)}
    _refuse_unexpressed(args)
    interpolation = _train_interpolation(args, config)
    recipe = replace(Recipe.from_timm({**config, "interpolation": interpolation}), train=True,
                     scale=_pair(args, "scale"), ratio=_pair(args, "ratio"), flip=_flip(args))
    transforms = _between_crop_and_tensor(args, config, interpolation)
    steps = [_erasing(args)] if _flag(args, "reprob") > 0 else []
    return loader_keywords(recipe, transforms, steps)


def _flag(args: Any, name: str) -> Any:
    return getattr(args, name, DEFAULTS[name])


def _name(attribute: str) -> str:
    return "--" + attribute.replace("_", "-")


def _config(args: Any, data_config: Mapping[str, Any]) -> dict[str, Any]:
    """The data config with the flags train.py's `resolve_data_config(vars(args))` lets override the
    model's (`--mean`, `--std`, `--crop-pct`, `--interpolation`), for a config resolved without them."""
    if not isinstance(data_config, Mapping):
        raise OptionError(f"from_timm_args needs the model's data config (timm.data.resolve_data_config(vars(args), "
                          f"model=model)), got {type(data_config).__name__}")
    config = dict(data_config)
    for name in ("mean", "std"):
        value = _flag(args, name)
        if value:
            config[name] = tuple(value) * 3 if len(value) == 1 else tuple(value)
    if _flag(args, "crop_pct"):
        config["crop_pct"] = _flag(args, "crop_pct")
    if _flag(args, "interpolation"):
        config["interpolation"] = _flag(args, "interpolation")
    return config


def _refuse_unexpressed(args: Any) -> None:
    """OptionError for the train flags iofeed does not do as timm does, naming the flag and the value to pass."""
    mode = _flag(args, "train_crop_mode")
    if mode not in (None, "", "rrc"):
        raise OptionError(f"--train-crop-mode {mode}: iofeed's train crop is timm's 'rrc' (random-resized crop): "
                          "pass --train-crop-mode rrc, or leave it out")
    if _flag(args, "vflip") > 0:
        raise OptionError(f"--vflip {_flag(args, 'vflip')}: iofeed flips horizontally only: pass --vflip 0, or flip "
                          "vertically in your own transform=")
    if _flag(args, "aug_splits") > 0:
        raise OptionError(f"--aug-splits {_flag(args, 'aug_splits')}: AugMix splits need a dataset that returns "
                          "several views of each image (timm's AugMixDataset); iofeed returns one: leave --aug-splits "
                          "out")
    if _flag(args, "aug_repeats") > 0:
        raise OptionError(f"--aug-repeats {_flag(args, 'aug_repeats')}: timm's RepeatAugSampler deals each sample to "
                          "several ranks; iofeed deals each once per epoch: leave --aug-repeats out")
    if _flag(args, "resplit"):
        raise OptionError("--resplit leaves the first (clean) augmentation split unerased, and iofeed has no splits: "
                          "leave --resplit out")
    mixing = {"--mixup": _flag(args, "mixup") > 0, "--cutmix": _flag(args, "cutmix") > 0,
              "--cutmix-minmax": _flag(args, "cutmix_minmax") is not None}
    prefetcher = getattr(args, "prefetcher", not getattr(args, "no_prefetcher", True))
    if any(mixing.values()) and prefetcher:
        flags = ", ".join(flag for flag, on in mixing.items() if on)
        raise OptionError(f"{flags} with timm's prefetcher: train.py then mixes in the loader's collate_fn "
                          "(FastCollateMixup), which goes with create_loader: run with --no-prefetcher (train.py's "
                          "mixup_fn then mixes each batch iofeed hands out)")


def _train_interpolation(args: Any, config: Mapping[str, Any]) -> str:
    """train.py's `train_interpolation`: `--train-interpolation`, else the data config's."""
    asked = _flag(args, "train_interpolation") or config["interpolation"]
    if asked == "random":
        raise OptionError("--train-interpolation random (timm's default) resizes each image bilinear or bicubic at "
                          "random; iofeed resizes every image one way: pass --train-interpolation bicubic (or "
                          "bilinear)")
    if asked not in ("bilinear", "bicubic"):
        raise OptionError(f"--train-interpolation {asked}: iofeed resizes bilinear or bicubic: pass one of them")
    return str(asked)


def _pair(args: Any, name: str) -> tuple[float, float]:
    """`--scale` / `--ratio` as the Recipe takes them (a pair within its bounds), else refused naming the flag."""
    value = _flag(args, name)
    try:
        recipe = Recipe(scale=tuple(value)) if name == "scale" else Recipe(ratio=tuple(value))
    except (TypeError, OptionError) as exc:
        raise OptionError(f"{_name(name)} {value}: {exc}") from None
    return recipe.scale if name == "scale" else recipe.ratio


def _flip(args: Any) -> bool:
    hflip = _flag(args, "hflip")
    if hflip not in (0, 0.5):
        raise OptionError(f"--hflip {hflip}: iofeed mirrors half the images (--hflip 0.5) or none (--hflip 0)")
    return bool(hflip == 0.5)


def _between_crop_and_tensor(args: Any, config: Mapping[str, Any], interpolation: str) -> list[Any]:
    """timm's own steps between the crop and the tensor (auto-augment, colour jitter, grayscale, blur),
    built by its `transforms_imagenet_train` from the same flags, as a list of PIL transforms."""
    from timm.data.transforms_factory import transforms_imagenet_train

    try:
        _, between, _ = transforms_imagenet_train(
            img_size=int(config["input_size"][-1]), hflip=0.0, vflip=0.0, auto_augment=_flag(args, "aa"),
            color_jitter=_flag(args, "color_jitter"), color_jitter_prob=_flag(args, "color_jitter_prob"),
            grayscale_prob=_flag(args, "grayscale_prob"), gaussian_blur_prob=_flag(args, "gaussian_blur_prob"),
            interpolation=interpolation, mean=config["mean"], std=config["std"], separate=True)
    except (AssertionError, ValueError, KeyError) as exc:
        raise OptionError(f"--aa {_flag(args, 'aa')}: timm cannot build it ({type(exc).__name__}: {exc})") from None
    return list(between.transforms)


def _erasing(args: Any) -> Any:
    """timm's RandomErasing with train.py's flags, on the normalised batch where it is."""
    from timm.data import random_erasing

    erasing: Any = random_erasing.RandomErasing  # timm's classes are untyped
    mode = _flag(args, "remode")
    if mode not in ("const", "rand", "pixel"):
        raise OptionError(f"--remode {mode}: timm's random erasing modes are const, rand and pixel")
    return OnImagesDevice(erasing(_flag(args, "reprob"), mode=mode, max_count=_flag(args, "recount"),
                                        num_splits=0, device="cpu"))
