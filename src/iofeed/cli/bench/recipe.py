"""The bench's recipes, as each kind of feed runs them: crop + flip (every feed), and torchvision's
reference training recipe for the recipe feed pair: random-resized crop, flip, TrivialAugmentWide
and RandomErasing per sample, MixUp or CutMix per batch.

The DataLoader runs all of it in its workers, as torchvision's reference script does (per-sample
transforms in the dataset, MixUp/CutMix in `collate_fn`). iofeed runs the crop and flip itself,
TrivialAugmentWide and RandomErasing as `transform=` on the uint8 crop, normalises in the adapter
and mixes the batch on its device as `batch_transform=`. Erasing with the mean pixel on uint8 is
erasing with 0 after normalisation, the reference's value.
"""
from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ...adapters.normalize import IMAGENET_MEAN, IMAGENET_STD

ERASE_P = 0.25  # the reference's --random-erase for its recipes that use it
MIXUP_ALPHA, CUTMIX_ALPHA = 0.2, 1.0  # the reference's --mixup-alpha / --cutmix-alpha
MEAN_PIXEL = [round(255 * m) for m in IMAGENET_MEAN]


def in_dataloader(recipe: str, image_size: int, classes: int) -> dict[str, Any]:
    """The DataLoader feed's `transform` (of its ImageFolder) and `collate_fn` for `recipe` ("": crop + flip)."""
    return _DATALOADER[recipe](image_size, classes)


def in_iofeed(recipe: str, classes: int) -> dict[str, Any]:
    """The `iofeed.loader` keywords of `recipe`: none for "" (its own crop + flip)."""
    return _IOFEED[recipe](classes)


def crop_flip(image_size: int) -> Any:
    """torchvision's crop + flip and normalisation on a PIL image: float CHW."""
    from torchvision import transforms

    return transforms.Compose([
        transforms.RandomResizedCrop(image_size), transforms.RandomHorizontalFlip(), transforms.ToTensor(),
        transforms.Normalize(IMAGENET_MEAN, IMAGENET_STD),
    ])


def reference_transform(image_size: int) -> Any:
    """The reference's per-sample transforms on a PIL image: normalised float CHW."""
    import torch
    from torchvision.transforms import v2

    return v2.Compose([
        v2.RandomResizedCrop(image_size, antialias=True), v2.RandomHorizontalFlip(), v2.TrivialAugmentWide(),
        v2.PILToTensor(), v2.ToDtype(torch.float32, scale=True), v2.Normalize(IMAGENET_MEAN, IMAGENET_STD),
        v2.RandomErasing(p=ERASE_P),
    ])


def iofeed_transform() -> Any:
    """The per-sample part iofeed does not do itself, on its uint8 HWC crop: uint8 CHW.
    TrivialAugmentWide runs on a PIL image, as in the DataLoader: its PIL kernels are the faster
    (docs/decisions/0067-recipe-runs-trivialaugmentwide-on-a-pil-image.md)."""
    from torchvision.transforms import v2

    return v2.Compose([v2.ToPILImage(), v2.TrivialAugmentWide(), v2.PILToTensor(),
                       v2.RandomErasing(p=ERASE_P, value=MEAN_PIXEL)])


def mix(classes: int) -> Any:
    """MixUp or CutMix, half the batches each: (images, int labels) -> (images, soft labels)."""
    from torchvision.transforms import v2

    return v2.RandomChoice([v2.MixUp(alpha=MIXUP_ALPHA, num_classes=classes),
                            v2.CutMix(alpha=CUTMIX_ALPHA, num_classes=classes)])


class MixingCollate:
    """The DataLoader's `collate_fn`: the default collation, then MixUp or CutMix (picklable)."""

    def __init__(self, classes: int) -> None:
        self.mix = mix(classes)

    def __call__(self, samples: list[Any]) -> Any:
        from torch.utils.data import default_collate

        return self.mix(*default_collate(samples))


_DATALOADER: dict[str, Callable[[int, int], dict[str, Any]]] = {
    "": lambda size, classes: {"transform": crop_flip(size), "collate_fn": None},
    "reference": lambda size, classes: {"transform": reference_transform(size), "collate_fn": MixingCollate(classes)},
}
_IOFEED: dict[str, Callable[[int], dict[str, Any]]] = {
    "": lambda classes: {},
    "reference": lambda classes: {"transform": iofeed_transform(), "batch_transform": mix(classes)},
}
