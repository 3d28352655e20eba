"""A training script's own augmentation flags keep their meaning once the loader is iofeed (issue
38: `--aa`, `--reprob`, `--mixup`, `--auto-augment`, `--random-erase`, `--interpolation` and the
crop sizes stayed accepted by timm's and torchvision's scripts and did nothing): `from_timm_args`
and `from_torchvision_args` build the loader keywords from the parsed flags, or refuse naming the
flag. Parsed with stand-ins of the scripts' parsers (tests/helpers/script_parsers.py)."""
from __future__ import annotations

import pickle

import numpy as np
import pytest

import iofeed
from helpers.script_parsers import timm_args, torchvision_train_parser
from iofeed.errors import OptionError

pytestmark = pytest.mark.torch
SIZE = 32
DATA_CONFIG = {"input_size": (3, SIZE, SIZE), "interpolation": "bicubic", "mean": (0.485, 0.456, 0.406),
               "std": (0.229, 0.224, 0.225), "crop_pct": 0.95, "crop_mode": "center"}


def _tv(argv: list[str]):
    return torchvision_train_parser().parse_args(argv)


def _first(dataset, workers: int = 1, **keywords):
    with iofeed.loader(dataset, batch_size=8, framework="torch", workers=workers, **keywords) as loader:
        images, labels = next(iter(loader))
        return images.clone(), labels.clone()


# timm's train.py


@pytest.mark.timm
def test_timm_crop_flags_become_the_recipe_and_the_data_config_the_rest():
    args = timm_args(["--scale", "0.35", "1", "--ratio", "1", "1", "--hflip", "0", "--train-interpolation",
                      "bilinear", "--no-prefetcher"])
    recipe = iofeed.from_timm_args(args, DATA_CONFIG)["augment"]
    assert (recipe.scale, recipe.ratio, recipe.flip, recipe.interpolation) == ((0.35, 1.0), (1.0, 1.0), False,
                                                                               "bilinear")
    assert (recipe.image_size, recipe.mean, recipe.train) == (SIZE, DATA_CONFIG["mean"], True)
    val = iofeed.from_timm_args(timm_args(["--crop-pct", "0.9", "--mean", "0.5", "--std", "0.5", "0.5", "0.5",
                                           "--interpolation", "bilinear"]), DATA_CONFIG, split="val")
    assert val == {"augment": iofeed.Recipe(image_size=SIZE, crop_fraction=0.9, interpolation="bilinear",
                                            mean=(0.5,) * 3, std=(0.5,) * 3)}
    no_aug = iofeed.from_timm_args(timm_args(["--no-aug"]), DATA_CONFIG)["augment"]
    assert (no_aug.train, no_aug.crop_fraction) == (False, 1.0), "timm's no-aug train transform: resize + centre crop"


@pytest.mark.timm
def test_timm_auto_augment_and_colour_jitter_are_timms_own_steps_in_the_workers():
    from timm.data.auto_augment import RandAugment
    from torchvision.transforms import ColorJitter

    base = ["--train-interpolation", "bicubic", "--no-prefetcher"]
    jitter = iofeed.from_timm_args(timm_args(base), DATA_CONFIG)["transform"]
    assert isinstance(jitter.transform, ColorJitter) and jitter.transform.brightness == (0.6, 1.4), \
        "timm's default --color-jitter 0.4 runs when there is no --aa"
    rand = iofeed.from_timm_args(timm_args([*base, "--aa", "rand-m9-mstd0.5-inc1"]), DATA_CONFIG)["transform"]
    assert isinstance(rand.transform, RandAugment), "with --aa, timm turns the colour jitter off"
    assert pickle.loads(pickle.dumps(rand)).transform.ops[0].name == rand.transform.ops[0].name
    with pytest.raises(OptionError, match=r"^--aa nonsense: timm cannot build it"):
        iofeed.from_timm_args(timm_args([*base, "--aa", "nonsense"]), DATA_CONFIG)


@pytest.mark.timm
def test_timm_flags_run_in_the_loader_the_same_whatever_the_worker_count(colour_dataset):
    keywords = iofeed.from_timm_args(timm_args(["--aa", "rand-m9-mstd0.5-inc1", "--reprob", "0.5",
                                                "--train-interpolation", "bicubic", "--no-prefetcher"]), DATA_CONFIG)
    one, labels_one = _first(colour_dataset, 1, **keywords)
    two, labels_two = _first(colour_dataset, 2, **keywords)
    assert one.shape == (8, 3, SIZE, SIZE) and bool((one == two).all()) and bool((labels_one == labels_two).all())
    plain = iofeed.from_timm_args(timm_args(["--train-interpolation", "bicubic", "--color-jitter", "0",
                                             "--no-prefetcher"]), DATA_CONFIG)
    assert set(plain) == {"augment", "transform"} and not bool((_first(colour_dataset, 1, **plain)[0] == one).all())


@pytest.mark.timm
def test_timm_random_erasing_erases_each_image_of_the_normalised_batch_on_its_own(colour_dataset):
    keywords = iofeed.from_timm_args(timm_args(["--reprob", "1", "--remode", "const", "--color-jitter", "0",
                                                "--train-interpolation", "bicubic", "--no-prefetcher"]), DATA_CONFIG)
    images, _ = _first(colour_dataset, **keywords)
    zero = (images == 0).all(dim=1)  # const mode: 0 in the normalised space, over every channel
    assert all(bool(zero[i].any()) for i in range(len(images))), "every image has its erased box"
    assert len({tuple(z.nonzero()[0].tolist()) for z in zero}) > 1, "each image its own box"


@pytest.mark.timm
@pytest.mark.parametrize(("argv", "message"), [
    ([], r"^--train-interpolation random \(timm's default\) .*pass --train-interpolation bicubic"),
    (["--vflip", "0.5"], r"^--vflip 0.5: iofeed flips horizontally only"),
    (["--hflip", "0.3"], r"^--hflip 0.3: iofeed mirrors half the images"),
    (["--aug-splits", "3"], r"^--aug-splits 3: AugMix splits"),
    (["--aug-repeats", "3"], r"^--aug-repeats 3.0: timm's RepeatAugSampler"),
    (["--resplit"], r"^--resplit leaves"),
    (["--train-crop-mode", "rkrc"], r"^--train-crop-mode rkrc"),
    (["--scale", "0.08", "0.5", "1"], r"^--scale \[0.08, 0.5, 1.0\]: Recipe scale must be a pair"),
    (["--reprob", "0.5", "--remode", "zebra"], r"^--remode zebra"),
])
def test_what_timm_does_otherwise_is_refused_naming_the_flag(argv, message):
    interpolation = ["--train-interpolation", "bicubic"] if argv else []  # no flags: timm's default, refused
    args = timm_args([*argv, *interpolation, "--no-prefetcher"])
    with pytest.raises(OptionError, match=message) as info:
        iofeed.from_timm_args(args, DATA_CONFIG)
    assert "\n" not in str(info.value)


@pytest.mark.timm
def test_timm_mixup_stays_with_train_pys_mixup_fn_and_the_prefetcher_is_refused_with_it():
    args = timm_args(["--mixup", "0.8", "--cutmix", "1.0", "--train-interpolation", "bicubic"])
    with pytest.raises(OptionError, match=r"^--mixup, --cutmix with timm's prefetcher.*run with --no-prefetcher"):
        iofeed.from_timm_args(args, DATA_CONFIG)
    args.prefetcher = False  # --no-prefetcher: train.py's mixup_fn mixes each batch; nothing to add
    assert "batch_transform" not in iofeed.from_timm_args(args, DATA_CONFIG)


# torchvision's classification references


def test_torchvision_crop_sizes_and_interpolation_become_the_recipes():
    args = _tv(["--train-crop-size", "176", "--val-resize-size", "232", "--val-crop-size", "224", "--interpolation",
                "bicubic"])
    train = iofeed.from_torchvision_args(args)
    assert train == {"augment": iofeed.Recipe(train=True, image_size=176, interpolation="bicubic")}
    val = iofeed.from_torchvision_args(args, split="val")["augment"]
    assert (val.train, val.image_size, val.interpolation) == (False, 224, "bicubic")
    assert val.crop_fraction == pytest.approx(224 / 232), "Resize(232) + CenterCrop(224)"


@pytest.mark.parametrize(("policy", "kind"), [("ta_wide", "TrivialAugmentWide"), ("ra", "RandAugment"),
                                              ("augmix", "AugMix"), ("imagenet", "AutoAugment")])
def test_torchvision_auto_augment_policies_run_on_the_pil_image_in_the_workers(policy, kind):
    transform = iofeed.from_torchvision_args(_tv(["--auto-augment", policy, "--ra-magnitude", "5"]))["transform"]
    assert type(transform.transform).__name__ == kind
    if policy == "ra":
        assert transform.transform.magnitude == 5
    image = np.random.default_rng(0).integers(0, 256, (SIZE, SIZE, 3), dtype=np.uint8)
    out = pickle.loads(pickle.dumps(transform))(image)
    assert out.shape == image.shape and out.dtype == np.uint8


def test_torchvision_random_erase_and_mixup_run_on_the_batch(colour_dataset):
    args = _tv(["--random-erase", "1", "--mixup-alpha", "0.2", "--cutmix-alpha", "1.0", "--train-crop-size",
                str(SIZE)])
    keywords = iofeed.from_torchvision_args(args, num_classes=4)
    images, labels = _first(colour_dataset, **keywords)
    assert labels.shape == (8, 4) and labels.dtype.is_floating_point, "soft labels, as the collate_fn made them"
    assert bool(((labels.sum(dim=1) - 1).abs() < 1e-5).all())
    erased = iofeed.from_torchvision_args(_tv(["--random-erase", "1", "--train-crop-size", str(SIZE)]))
    images, _ = _first(colour_dataset, **erased)
    zero = (images == 0).all(dim=1)
    assert all(bool(zero[i].any()) for i in range(len(images))) and len({tuple(z.nonzero()[0].tolist())
                                                                         for z in zero}) > 1


@pytest.mark.parametrize(("argv", "keywords", "message"), [
    (["--interpolation", "nearest"], {}, r"^--interpolation nearest: iofeed resizes bilinear or bicubic"),
    (["--auto-augment", "cifar100"], {}, r"^--auto-augment cifar100 is not a policy .*ta_wide.*imagenet"),
    (["--mixup-alpha", "0.2"], {}, r"^--mixup-alpha 0.2 mixes labels .*pass num_classes="),
    (["--ra-sampler"], {}, r"^--ra-sampler"),
    (["--val-crop-size", "300"], {"split": "val"}, r"^--val-crop-size 300 is larger than --val-resize-size 256"),
    (["--weights", "IMAGENET1K_V2", "--test-only"], {"split": "val"}, r"^--weights IMAGENET1K_V2 with --test-only"),
])
def test_what_the_references_do_otherwise_is_refused_naming_the_flag(argv, keywords, message):
    with pytest.raises(OptionError, match=message) as info:
        iofeed.from_torchvision_args(_tv(argv), **keywords)
    assert "\n" not in str(info.value)
