"""torchvision's reference training recipe, for the bench's recipe feed pair: random-resized crop,
flip, TrivialAugmentWide and RandomErasing per sample, MixUp or CutMix per batch.

The DataLoader runs all of it in its workers, as torchvision's reference script does (per-sample
transforms in the dataset, MixUp/CutMix in `collate_fn`). iofeed runs the crop and flip itself,
TrivialAugmentWide and RandomErasing as `transform=` on the uint8 crop, normalises in the adapter
and mixes the batch on its device as `batch_transform=`. Erasing with the mean pixel on uint8 is
erasing with 0 after normalisation, the reference's value.
"""
from __future__ import annotations

from typing import Any

from ..adapters.normalize import IMAGENET_MEAN, IMAGENET_STD

ERASE_P = 0.25  # the reference's --random-erase for its recipes that use it
MIXUP_ALPHA, CUTMIX_ALPHA = 0.2, 1.0  # the reference's --mixup-alpha / --cutmix-alpha
MEAN_PIXEL = [round(255 * m) for m in IMAGENET_MEAN]


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
    (docs/architecture.md, "Why the code is as it is")."""
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
