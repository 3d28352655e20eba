"""Transforms that take box targets, importable by the loader's worker processes."""
from __future__ import annotations

from typing import Any


def torchvision_detection(size: int = 64) -> Any:
    """The torchvision detection reference's recipe (RandomIoUCrop, flip, resize, sanitize)."""
    from torchvision.transforms import v2

    return v2.Compose([v2.RandomIoUCrop(), v2.RandomHorizontalFlip(), v2.Resize((size, size)),
                       v2.SanitizeBoundingBoxes()])


def albumentations_detection(size: int = 64, form: str = "coco") -> Any:
    """A random crop and flip, boxes in albumentations' `form`, labels as a label field."""
    import albumentations as A

    return A.Compose([A.RandomCrop(size, size), A.HorizontalFlip()],
                     bbox_params=A.BboxParams(format=form, label_fields=["labels"], min_visibility=0.3))


try:
    from torchvision.transforms import v2

    class ImageOnly(v2.Transform):
        """Returns the image without its targets: the wrong thing."""

        def forward(self, *inputs: Any) -> Any:
            return inputs[0]
except ImportError:  # torchvision missing: the tests that use it are skipped
    pass


def image_only(image: Any) -> Any:
    """A plain function: its type does not say how to hand it boxes."""
    return image
