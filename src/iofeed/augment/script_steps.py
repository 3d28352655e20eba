"""Small adapters that let a training script's own augmentation objects run as iofeed's
`transform=` (per sample, in the worker processes) and `batch_transform=` (per batch, where the
batch is): what `from_timm_args` and `from_torchvision_args` build from a script's flags. Each is
a top-level class, so that it pickles to the workers when what it holds does."""
from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np


class PilImageTransform:
    """A transform of PIL images (timm's RandAugment and ColorJitter, torchvision's AutoAugment,
    TrivialAugmentWide...) as a per-sample `transform=`: uint8 HWC numpy in and out, as the
    scripts' DataLoaders ran it on the PIL image between the crop and the tensor."""

    def __init__(self, transform: Callable[[Any], Any]) -> None:
        self.transform = transform

    def __call__(self, image: np.ndarray) -> np.ndarray:
        from PIL import Image

        return np.asarray(self.transform(Image.fromarray(image)), dtype=np.uint8)

    def __repr__(self) -> str:
        return f"PilImageTransform({self.transform!r})"


class EachImage:
    """A transform of one CHW tensor (torchvision's RandomErasing) over every image of a batch, each
    drawn on its own as a DataLoader's workers drew it (on a batch tensor it would erase the same
    box in every image)."""

    def __init__(self, transform: Callable[[Any], Any]) -> None:
        self.transform = transform

    def __call__(self, images: Any, labels: Any) -> tuple[Any, Any]:
        for i in range(len(images)):
            images[i] = self.transform(images[i])
        return images, labels

    def __repr__(self) -> str:
        return f"EachImage({self.transform!r})"


class OnImagesDevice:
    """timm's RandomErasing over a batch (it erases each image on its own), drawing its noise on the
    device the images are on (it holds one device, fixed when made)."""

    def __init__(self, erasing: Any) -> None:
        self.erasing = erasing

    def __call__(self, images: Any, labels: Any) -> tuple[Any, Any]:
        self.erasing.device = images.device
        return self.erasing(images), labels

    def __repr__(self) -> str:
        return f"OnImagesDevice({self.erasing!r})"


class BatchSteps:
    """Batch steps `(images, labels) -> (images, labels)` run in order (erasing, then MixUp/CutMix:
    the order of a DataLoader's transform and its collate_fn)."""

    def __init__(self, steps: Sequence[Callable[[Any, Any], tuple[Any, Any]]]) -> None:
        self.steps = list(steps)

    def __call__(self, images: Any, labels: Any) -> tuple[Any, Any]:
        for step in self.steps:
            images, labels = step(images, labels)
        return images, labels

    def __repr__(self) -> str:
        return f"BatchSteps({self.steps!r})"


def loader_keywords(recipe: Any, transforms: list[Any], batch_steps: list[Any]) -> dict[str, Any]:
    """`augment=`, and `transform=` / `batch_transform=` when there is something to run."""
    out: dict[str, Any] = {"augment": recipe}
    if transforms:
        out["transform"] = PilImageTransform(transforms[0] if len(transforms) == 1 else _compose(transforms))
    if batch_steps:
        out["batch_transform"] = batch_steps[0] if len(batch_steps) == 1 else BatchSteps(batch_steps)
    return out


def _compose(transforms: list[Any]) -> Any:
    from torchvision import transforms as tv

    return tv.Compose(transforms)
