"""The built-in steps (`iofeed.Recipe`, `augment=`): each against torchvision's own transform on
the same box, every engine honouring it or refusing it with the engine that can."""
from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

import iofeed
from helpers.images import label_from_pixels, make_same_picture_tree, png_bytes, smooth_rgb
from helpers.runs import slot_memory
from iofeed.augment.batch_key import BatchKey
from iofeed.augment.recipe import MAX_RATIO, MIN_CROP_FRACTION, MIN_SCALE, PRESETS, Recipe, recipe_of
from iofeed.errors import OptionError
from iofeed.options.loader_options import LoaderOptions

WIDTH, HEIGHT = 320, 256  # centre crop of 0.875: an integer box (48, 16, 272, 240)


@pytest.fixture(scope="module")
def one_png(tmp_path_factory) -> tuple[Path, np.ndarray]:
    """A folder of one PNG (no JPEG rounding, no DCT scaling), and its pixels."""
    root = tmp_path_factory.mktemp("one") / "tree"
    (root / "a").mkdir(parents=True)
    image = smooth_rgb(WIDTH, HEIGHT, seed=9)
    (root / "a" / "x.png").write_bytes(png_bytes(image))
    return root, np.asarray(image)


def _first(root: Path, size: int, augment, seed: int = 11, **options) -> np.ndarray:
    with iofeed.loader(root, batch_size=1, image_size=size, augment=augment, workers=1, seed=seed,
                       drop_last=False, **options) as ld:
        images, _ = next(iter(ld))
        return np.array(images[0])


def _box(augment, size: int, split: str = "train", seed: int = 11):
    """The box and flip iofeed draws for sample 0 of batch 0 of epoch 0."""
    augmentation = LoaderOptions(batch_size=1, image_size=size, augment=augment, split=split).augmentation
    return augmentation.box(WIDTH, HEIGHT, BatchKey(seed, 0, 0, 0).rng())


def _torchvision(pixels: np.ndarray, box, flip: bool, size: int, interpolation: str) -> np.ndarray:
    """torchvision v2's resized crop (and flip) of the same box, as HWC uint8."""
    import torch
    from PIL import Image
    from torchvision.transforms import v2
    from torchvision.transforms.v2 import functional as F

    left, top, right, bottom = (int(round(v)) for v in box)
    mode = {"bilinear": v2.InterpolationMode.BILINEAR, "bicubic": v2.InterpolationMode.BICUBIC,
            "area": v2.InterpolationMode.BOX}[interpolation]
    if interpolation == "area":  # the box filter is Pillow's: torchvision runs it on PIL images
        image = F.resized_crop(Image.fromarray(pixels), top, left, bottom - top, right - left, [size, size], mode)
        out = np.asarray(F.horizontal_flip(image) if flip else image)
    else:
        tensor = torch.from_numpy(pixels.copy()).permute(2, 0, 1)
        image = F.resized_crop(tensor, top, left, bottom - top, right - left, [size, size], mode, antialias=True)
        out = (F.horizontal_flip(image) if flip else image).permute(1, 2, 0).numpy()
    return out.astype(int)


def _close(a: np.ndarray, b: np.ndarray) -> None:
    """Within the tolerance the crop is held to (tests/test_resize.py): rounding only."""
    difference = np.abs(a.astype(int) - b.astype(int))
    assert difference.max() <= 1 and difference.mean() < 0.5, (difference.max(), difference.mean())


@pytest.mark.torchvision
@pytest.mark.parametrize("interpolation", ["bilinear", "bicubic", "area"])
@pytest.mark.parametrize("size", [96, 400])  # shrinking and enlarging crops
def test_interpolation_matches_torchvision_on_the_same_box(one_png, interpolation, size):
    root, pixels = one_png
    recipe = Recipe(train=True, interpolation=interpolation)
    box, flip = _box(recipe, size)
    _close(_first(root, size, recipe), _torchvision(pixels, box, flip, size, interpolation))


@pytest.mark.torchvision
@pytest.mark.parametrize("scale, ratio", [((0.35, 1.0), (3 / 4, 4 / 3)), ((0.5, 0.5), (2.0, 2.0)),
                                          ((1.0, 1.0), (1.25, 1.25))])
def test_scale_and_ratio_shape_the_crop_as_torchvision_does(one_png, scale, ratio):
    """The drawn box honours scale and ratio, and its pixels are torchvision's resized crop of it."""
    root, pixels = one_png
    recipe = Recipe(train=True, scale=scale, ratio=ratio, flip=False)
    box, flip = _box(recipe, 128)
    width, height = box[2] - box[0], box[3] - box[1]
    assert not flip
    if scale[0] == scale[1] and ratio[0] == ratio[1]:  # fixed: the box's sides are the rounded exact ones
        area = WIDTH * HEIGHT * scale[0]
        assert (width, height) == (round(math.sqrt(area * ratio[0])), round(math.sqrt(area / ratio[0])))
    _close(_first(root, 128, recipe), _torchvision(pixels, box, False, 128, "bilinear"))


@pytest.mark.torchvision
def test_flip_and_no_flip(one_png):
    """flip=True mirrors about half the crops, each as torchvision's horizontal_flip of the same box; False none."""
    root, pixels = one_png
    flipped = {seed: _box(Recipe(train=True), 64, seed=seed)[1] for seed in range(40)}
    assert 10 < sum(flipped.values()) < 30
    assert not any(_box(Recipe(train=True, flip=False), 64, seed=seed)[1] for seed in range(40))
    for seed in (min(s for s, f in flipped.items() if f), min(s for s, f in flipped.items() if not f)):
        for recipe in (Recipe(train=True), Recipe(train=True, flip=False)):
            box, flip = _box(recipe, 64, seed=seed)
            _close(_first(root, 64, recipe, seed=seed), _torchvision(pixels, box, flip, 64, "bilinear"))


@pytest.mark.torchvision
@pytest.mark.parametrize("fraction", [0.875, 0.95])
def test_eval_crop_fraction_matches_resize_then_centre_crop(one_png, fraction):
    """Evaluation: torchvision's Resize(size / fraction) + CenterCrop(size), the usual eval pipeline."""
    import torch
    from torchvision.transforms import v2

    root, pixels = one_png
    recipe = Recipe(crop_fraction=fraction)
    mine = _first(root, 224, recipe, split="val")
    reference = v2.Compose([v2.Resize(round(224 / fraction), antialias=True), v2.CenterCrop(224)])(
        torch.from_numpy(pixels).permute(2, 0, 1)).permute(1, 2, 0).numpy()
    blocks = [x.astype(float).reshape(28, 8, 28, 8, 3).mean(axis=(1, 3)) for x in (mine, reference)]
    assert np.abs(blocks[0] - blocks[1]).mean() < 2.0  # the same region: resize/crop order differs
    box, _ = _box(recipe, 224, "val")
    _close(mine, _torchvision(pixels, box, False, 224, "bilinear"))


@pytest.mark.torch
@pytest.mark.torchvision
@pytest.mark.parametrize("augment", ["inception", Recipe(mean=(0.1, 0.2, 0.3), std=(0.3, 0.2, 0.1))])
def test_mean_and_std_match_torchvision_normalize(colour_dataset, augment):
    import torch
    from torchvision.transforms import v2

    recipe = recipe_of(augment)
    kwargs = {"batch_size": 4, "image_size": 32, "workers": 1, "augment": augment, "split": "val"}
    with iofeed.loader(colour_dataset, **kwargs) as ld:
        uint8 = torch.from_numpy(np.array(next(iter(ld))[0])).permute(0, 3, 1, 2)
    with iofeed.loader(colour_dataset, framework="torch", **kwargs) as ld:
        images, _ = next(iter(ld))
    reference = v2.Normalize(recipe.mean, recipe.std)(v2.ToDtype(torch.float32, scale=True)(uint8))
    assert torch.allclose(images, reference, atol=1e-5)


@pytest.mark.torch
def test_normalize_false_hands_out_uint8(colour_dataset):
    import torch

    kwargs = {"batch_size": 4, "image_size": 32, "workers": 1, "split": "val"}
    with iofeed.loader(colour_dataset, **kwargs) as ld:
        expected = torch.from_numpy(np.array(next(iter(ld))[0])).permute(0, 3, 1, 2)
    with iofeed.loader(colour_dataset, framework="torch", augment="uint8", **kwargs) as ld:
        images, _ = next(iter(ld))
    assert images.dtype == torch.uint8 and torch.equal(images, expected)
    assert images.is_contiguous()


def test_presets_and_augment_values():
    assert recipe_of(None) == Recipe() and recipe_of(True).train is True and recipe_of(False).train is False
    assert recipe_of("finetune").scale == (0.35, 1.0) and recipe_of("timm").interpolation == "bicubic"
    assert Recipe.preset("timm", train=False).train is False and set(PRESETS) >= {"imagenet", "finetune", "uint8"}
    options = LoaderOptions(batch_size=4, augment="finetune", split="val")
    assert not options.train and options.augmentation.scale == (0.35, 1.0)
    assert LoaderOptions(batch_size=4, augment=Recipe(train=True), split="val").train


BAD_RECIPES = [
    ({"scale": (0.5, 0.2)}, "scale"), ({"scale": (0.0, 1.0)}, "scale"), ({"scale": 0.5}, "scale"),
    ({"ratio": (2.0, 1.0)}, "ratio"), ({"ratio": (0, 1)}, "ratio"), ({"flip": 1}, "flip"),
    ({"crop_fraction": 0}, "crop_fraction"), ({"crop_fraction": 1.2}, "crop_fraction"),
    ({"interpolation": "lanczos"}, "interpolation='lanczos'"),
    ({"mean": (0.5, 0.5)}, "mean"), ({"std": (0.2, 0, 0.2)}, "std"),
    ({"normalize": "no"}, "normalize"), ({"train": "yes"}, "train"),
]


INF, NAN = float("inf"), float("nan")
# Each made every image NaN/inf, or failed on every sample (an overflow in the crop draw or the
# decode), or silently gave the whole image instead of the crop asked for.
EXTREME_RECIPES = [
    ({"mean": (INF, 0.4, 0.4)}, "mean"), ({"mean": (NAN, 0.4, 0.4)}, "mean"), ({"mean": (-INF, 0.4, 0.4)}, "mean"),
    ({"std": (1e-300, 0.2, 0.2)}, "std"), ({"std": (INF, 0.2, 0.2)}, "std"), ({"std": (NAN, 0.2, 0.2)}, "std"),
    ({"mean": (1.5, 0.4, 0.4)}, "mean"), ({"std": (0.2, 0.2, 1.5)}, "std"),
    ({"ratio": (1, INF)}, "ratio"), ({"ratio": (NAN, 1)}, "ratio"), ({"ratio": (1e-300, 1e-300)}, "ratio"),
    ({"ratio": (1, 1e9)}, "ratio"), ({"scale": (1e-9, 1e-9)}, "scale"), ({"scale": (NAN, 1.0)}, "scale"),
    ({"crop_fraction": 1e-9}, "crop_fraction"), ({"crop_fraction": NAN}, "crop_fraction"),
]


@pytest.mark.parametrize("fields, named", BAD_RECIPES + EXTREME_RECIPES,
                         ids=lambda v: repr(v) if isinstance(v, dict) else None)
def test_bad_recipe_values_are_one_line_errors(fields, named):
    with pytest.raises(OptionError) as info:
        Recipe(**fields)
    assert f"Recipe {named}" in str(info.value) and "\n" not in str(info.value)


@pytest.mark.parametrize("field, given, expected", [
    ("mean", (123.675, 116.28, 103.53), "mean=(0.485, 0.456, 0.406)"),
    ("std", (58.395, 57.12, 57.375), "std=(0.229, 0.224, 0.225)"),
])
def test_a_mean_or_std_on_the_0_255_scale_is_refused_with_the_0_1_values(field, given, expected):
    """Recipe takes the 0-1 scale only: ImageNet's 0-255 numbers would normalise every pixel to about -2."""
    with pytest.raises(OptionError) as info:
        Recipe(**{field: given})
    assert "0-255 scale" in str(info.value) and expected in str(info.value) and "\n" not in str(info.value)


@pytest.mark.parametrize("recipe, split", [
    (Recipe(scale=(MIN_SCALE, MIN_SCALE), ratio=(1 / MAX_RATIO, 1 / MAX_RATIO)), "train"),
    (Recipe(scale=(MIN_SCALE, MIN_SCALE), ratio=(MAX_RATIO, MAX_RATIO)), "train"),
    (Recipe(scale=(1.0, 1.0), ratio=(1 / MAX_RATIO, 1 / MAX_RATIO)), "train"),  # the fallback: a 1-2 px wide box
    (Recipe(crop_fraction=MIN_CROP_FRACTION), "val"),
])
def test_recipes_at_the_bounds_deliver_every_sample_with_its_label(colour_dataset, recipe, split):
    """What is accepted works: each extreme still crops every sample, and its pixels keep its label."""
    with iofeed.loader(colour_dataset, batch_size=4, image_size=32, workers=1, augment=recipe, split=split,
                       drop_last=False, skips=iofeed.Skips(max_skipped=0)) as ld:
        seen = [(label_from_pixels(image), int(label)) for images, labels in ld
                for image, label in zip(np.array(images), np.array(labels), strict=True)]
        assert ld.stats.images == len(seen) == {"train": 32, "val": 8}[split]
    assert all(found == label for found, label in seen), seen


BAD_LOADER = [
    ({"augment": "imagenette"}, "imagenette"), ({"augment": 3}, "augment=3"),
    ({"augment": Recipe(interpolation="area"), "engine": "dali"}, "engine='workers'"),
    ({"augment": "timm", "gpu_augment": True, "framework": "torch"}, "bilinear"),
    ({"augment": "uint8", "framework": "torch", "output": iofeed.Output(dtype="float16")}, "normalize=False"),
]


@pytest.mark.parametrize("options, named", BAD_LOADER, ids=lambda v: repr(v) if isinstance(v, dict) else None)
def test_bad_recipe_arguments_are_refused_before_any_work(colour_dataset, options, named):
    before = slot_memory()
    with pytest.raises(OptionError) as info:
        iofeed.loader(colour_dataset, batch_size=4, **options)
    assert named in str(info.value) and "\n" not in str(info.value)
    assert slot_memory() == before


def _block_means(images) -> np.ndarray:
    """8x8-pixel block means of NHWC images: the same box and flip agree within a few levels
    whatever the resampling kernel; another box or a missed flip differs by tens."""
    x = np.asarray(images, np.float64)
    n, side = x.shape[0], x.shape[1] // 8
    return x[:, : side * 8, : side * 8].reshape(n, side, 8, side, 8, 3).mean(axis=(2, 4))


ENGINE_RECIPES = [Recipe(interpolation="bicubic", scale=(0.3, 0.6), ratio=(0.5, 2.0), flip=False),
                  Recipe(train=False, crop_fraction=0.6, interpolation="bicubic")]


@pytest.mark.dali
@pytest.mark.parametrize("recipe", ENGINE_RECIPES, ids=["train", "eval"])
def test_dali_honours_the_recipe_as_the_workers_engine_does(image_tree, recipe):
    pytest.importorskip("nvidia.dali")
    root, _ = image_tree
    runs = {}
    for engine in ("workers", "dali"):
        with iofeed.loader(root, batch_size=6, image_size=48, engine=engine, workers=1, augment=recipe, seed=2,
                           drop_last=False) as ld:
            runs[engine] = {i: img for images, _ in ld for i, img in zip(ld.last_indices.tolist(),
                                                                           np.array(images))}
    assert runs["dali"].keys() == runs["workers"].keys() and len(runs["dali"]) == 18
    keys = sorted(runs["dali"])
    a, b = (_block_means([runs[e][k] for k in keys]) for e in ("workers", "dali"))
    assert np.abs(a - b).mean() < 2.0


@pytest.mark.torch
def test_gpu_augment_honours_scale_ratio_flip_and_mean_std(image_tree, tmp_path):
    """gpu_augment (run on the CPU device here) against the workers' CPU path with one recipe, on
    photo-like pictures (on near-flat colour ones, another box or a missed flip moved the block
    means by about one level, within the old tolerance). The two resize kernels differ (bilinear
    against antialiased): 0.0015 normalised and 0.15 levels apart on average here, 1.4 at most."""
    import torch

    from iofeed.format.policy import ImagePolicy
    from iofeed.prepare.run import preprocess

    raw = tmp_path / "raw.iof"
    preprocess(image_tree[0], raw, policy=ImagePolicy(format="raw"), val_per_class=2, progress=False, workers=1)
    normalised = Recipe(scale=(0.6, 0.9), ratio=(0.9, 1.1), flip=False, mean=(0.2, 0.3, 0.4), std=(0.5, 0.4, 0.3))
    uint8 = Recipe(scale=(0.6, 0.9), normalize=False)
    for recipe, mean, most in ((normalised, 0.01, 0.1), (uint8, 1.0, 4.0)):  # normalised units; 0-255 levels
        runs = []
        for gpu_augment in (False, True):
            with iofeed.loader(raw, batch_size=4, image_size=64, framework="torch", workers=1, augment=recipe,
                               gpu_augment=gpu_augment, seed=3) as ld:
                runs.append(torch.cat([images for images, _ in ld]).permute(0, 2, 3, 1).numpy())
        assert len(runs[0]) == 12 and runs[0].dtype == runs[1].dtype
        assert (runs[1].dtype == np.uint8) == (not recipe.normalize)
        difference = np.abs(_block_means(runs[0]) - _block_means(runs[1]))
        assert difference.mean() < mean and difference.max() < most, (difference.mean(), difference.max())


@pytest.fixture(scope="module")
def same_picture(tmp_path_factory) -> Path:
    return make_same_picture_tree(tmp_path_factory.mktemp("same") / "tree")


def test_each_rank_epoch_and_batch_draws_its_own_crops_and_flips_reproducibly(same_picture):
    """Ranks must not augment in lockstep (every rank's batch b would be cropped and flipped alike),
    nor epochs or batches repeat each other's draws; each is a function of (seed, epoch, rank,
    batch): the same on a second run. Every image is the same picture, so only the draws differ."""
    def crops(rank: int) -> list[np.ndarray]:
        with iofeed.loader(same_picture, batch_size=2, image_size=32, workers=1, augment=True, seed=4,
                           placement=iofeed.Placement(rank=rank, world_size=2)) as ld:
            return [image for _ in range(2) for images, _ in ld for image in np.array(images)]  # 2 epochs

    ranks = [crops(0), crops(1)]
    assert len(ranks[0]) == len(ranks[1]) == 8  # 2 epochs of 2 batches of 2
    every = [image.tobytes() for images in ranks for image in images]
    assert len(set(every)) == 16, "two ranks, two epochs, two batches: 16 different crops"
    assert all(np.array_equal(a, b) for a, b in zip(crops(1), ranks[1], strict=True))
    augmentation = LoaderOptions(batch_size=2, augment=True).augmentation
    draws = [augmentation.box(WIDTH, HEIGHT, BatchKey(4, 0, rank, 0).rng()) for rank in (0, 1, 0)]
    assert draws[0] != draws[1] and draws[0] == draws[2]
