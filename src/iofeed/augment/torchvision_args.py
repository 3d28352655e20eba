"""torchvision's classification references (`references/classification/train.py`) flags as iofeed
loader keywords (`iofeed.from_torchvision_args`): once the loader is iofeed, `--auto-augment`,
`--random-erase`, `--mixup-alpha`... keep their meaning, or are refused naming the flag.

What `ClassificationPresetTrain` / `ClassificationPresetEval` and train.py's collate_fn did with
them: the random-resized crop and flip (`--train-crop-size`, `--interpolation`) or the eval
resize and centre crop (`--val-resize-size`, `--val-crop-size`) become the `Recipe`; the
auto-augment policy (`--auto-augment`, `--ra-magnitude`, `--augmix-severity`) runs on the PIL
image in the workers as `transform=`; random erasing (`--random-erase`, each image on its own,
on the normalised tensor) and MixUp/CutMix (`--mixup-alpha`, `--cutmix-alpha`, one of them per
batch, as the collate_fn did) run on the batch as `batch_transform=`. (docs/decisions/0075)
"""
from __future__ import annotations

from typing import Any

from ..errors import OptionError
from .recipe import Recipe
from .script_steps import EachImage, loader_keywords

# train.py's defaults, for a Namespace made by another parser that lacks a flag
DEFAULTS: dict[str, Any] = {
    "interpolation": "bilinear", "train_crop_size": 224, "val_crop_size": 224, "val_resize_size": 256,
    "auto_augment": None, "ra_magnitude": 9, "augmix_severity": 3, "random_erase": 0.0, "mixup_alpha": 0.0,
    "cutmix_alpha": 0.0, "ra_sampler": False, "weights": None, "test_only": False,
}


def from_torchvision_args(args: Any, split: str = "train", num_classes: int | None = None) -> dict[str, Any]:
    """The `iofeed.loader` keywords (`augment=`, and `transform=` / `batch_transform=` when the
    flags ask for them) that do what the references' presets and collate_fn do for `split` with the
    script's parsed `args`. `num_classes` (`len(loader.dataset.classes)`) is needed for
    `--mixup-alpha` / `--cutmix-alpha` (their one-hot labels). OptionError naming the flag for what
    iofeed cannot do the same way."""
    interpolation = _flag(args, "interpolation")
    if interpolation not in ("bilinear", "bicubic"):
        raise OptionError(f"--interpolation {interpolation}: iofeed resizes bilinear or bicubic: pass one of them")
    if split != "train":
        return {"augment": _eval_recipe(args, interpolation)}
    if _flag(args, "ra_sampler"):
        raise OptionError("--ra-sampler (repeated augmentation) deals each sample to several ranks; iofeed deals "
                          "each once per epoch: leave --ra-sampler out")
    recipe = Recipe(train=True, image_size=_flag(args, "train_crop_size"), interpolation=interpolation)
    transforms = [_auto_augment(args, interpolation)] if _flag(args, "auto_augment") else []
    steps = []
    if _flag(args, "random_erase") > 0:
        from torchvision import transforms as tv

        steps.append(EachImage(tv.RandomErasing(p=_flag(args, "random_erase"))))
    mixing = _mixing(args, num_classes)
    if mixing is not None:
        steps.append(mixing)
    return loader_keywords(recipe, transforms, steps)


def _flag(args: Any, name: str) -> Any:
    return getattr(args, name, DEFAULTS[name])


def _eval_recipe(args: Any, interpolation: str) -> Recipe:
    """`ClassificationPresetEval`: resize the shorter side to `--val-resize-size`, centre-crop
    `--val-crop-size`: iofeed's centre crop of that share of the shorter side."""
    if _flag(args, "weights") and _flag(args, "test_only"):
        raise OptionError(f"--weights {_flag(args, 'weights')} with --test-only evaluates with the weights' own "
                          "transforms: pass their sizes as --val-resize-size, --val-crop-size and --interpolation")
    crop, resize = _flag(args, "val_crop_size"), _flag(args, "val_resize_size")
    if crop > resize:
        raise OptionError(f"--val-crop-size {crop} is larger than --val-resize-size {resize} (torchvision then pads "
                          "the crop): pass a crop size of at most the resize size")
    return Recipe(train=False, image_size=crop, crop_fraction=crop / resize, interpolation=interpolation)


def _auto_augment(args: Any, interpolation: str) -> Any:
    """The preset's policy on PIL images: "ra", "ta_wide", "augmix" or an AutoAugmentPolicy name."""
    from torchvision.transforms import InterpolationMode, autoaugment

    policy, mode = _flag(args, "auto_augment"), InterpolationMode(interpolation)
    if policy == "ra":
        return autoaugment.RandAugment(interpolation=mode, magnitude=_flag(args, "ra_magnitude"))
    if policy == "ta_wide":
        return autoaugment.TrivialAugmentWide(interpolation=mode)
    if policy == "augmix":
        return autoaugment.AugMix(interpolation=mode, severity=_flag(args, "augmix_severity"))
    try:
        return autoaugment.AutoAugment(policy=autoaugment.AutoAugmentPolicy(policy), interpolation=mode)
    except ValueError:
        names = ", ".join(["ra", "ta_wide", "augmix", *(p.value for p in autoaugment.AutoAugmentPolicy)])
        raise OptionError(f"--auto-augment {policy} is not a policy of the references: one of {names}") from None


def _mixing(args: Any, num_classes: int | None) -> Any:
    """train.py's collate_fn: MixUp or CutMix (one, at random, when both alphas are given) on each batch."""
    alphas = {"--mixup-alpha": _flag(args, "mixup_alpha"), "--cutmix-alpha": _flag(args, "cutmix_alpha")}
    if not any(alpha > 0 for alpha in alphas.values()):
        return None
    given = " ".join(f"{flag} {alpha}" for flag, alpha in alphas.items() if alpha > 0)
    if isinstance(num_classes, bool) or not isinstance(num_classes, int) or num_classes < 2:
        raise OptionError(f"{given} mixes labels into one-hot rows: pass num_classes= (the dataset's class count, "
                          f"len(loader.dataset.classes)), got {num_classes!r}")
    from torchvision.transforms import v2

    mixes = [v2.MixUp(alpha=alphas["--mixup-alpha"], num_classes=num_classes)] if alphas["--mixup-alpha"] > 0 else []
    if alphas["--cutmix-alpha"] > 0:
        mixes.append(v2.CutMix(alpha=alphas["--cutmix-alpha"], num_classes=num_classes))
    return mixes[0] if len(mixes) == 1 else v2.RandomChoice(mixes)
