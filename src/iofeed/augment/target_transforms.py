"""`transform=` with box targets (`Output(target="boxes")` / "masks"): your transform takes and
returns each sample's boxes, labels (and instance masks) beside its image, in the workers, seeded
per sample as `SampleTransform` is.

The kind is told by type, and each is called in its library's own shape:
- a torchvision.transforms.v2 transform: `fn(tv_tensors.Image, {"boxes": tv_tensors.BoundingBoxes
  (XYXY), "labels": int64, "masks": tv_tensors.Mask (n, H, W)})`, the (image, target) pair of
  torchvision's detection references, which `SanitizeBoundingBoxes` finds its labels in;
- an albumentations `Compose` with `bbox_params`: `fn(image=, bboxes=, labels=, mask=)`, the
  boxes in its declared format, each with its position as an extra column (albumentations carries
  it along), so the labels and the instance-id map follow whichever boxes it keeps.

What comes back is checked (one line naming the transform), boxes returned in XYXY pixels."""
from __future__ import annotations

import sys
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..errors import OptionError, SampleError, WorkerError
from .batch_key import BatchKey
from .transform_checks import TransformedImage, torch_shape
from .transforms import (
    PROBE_TRIES,
    SampleTransform,
    as_hwc,
    checked_output,
    preserved_globals,
    probe_image,
    transform_name,
)

TORCHVISION, ALBUMENTATIONS = "torchvision", "albumentations"
ALBUMENTATIONS_FORMATS = ("pascal_voc", "coco", "albumentations", "yolo")
KINDS_FIX = ("pass a torchvision.transforms.v2 transform (e.g. v2.Compose) or an albumentations Compose with "
             "bbox_params")


@dataclass
class SampleTargets:
    """One sample's targets, in its image's pixels."""

    boxes: np.ndarray  # float32 (k, 4) xyxy
    labels: np.ndarray  # int64 (k,)
    mask: np.ndarray | None  # uint8 (H, W) instance ids: box j is id j + 1, 0 background


@dataclass
class PackedTargets:
    """A batch's transformed targets, flat: image i's are `boxes[offsets[i]:offsets[i + 1]]`."""

    boxes: np.ndarray  # float32 (m, 4) xyxy in output pixels
    labels: np.ndarray  # int64 (m,)
    offsets: np.ndarray  # int64 (n + 1,)
    masks: np.ndarray | None  # uint8 (n, H, W) instance ids renumbered to the boxes kept
    dropped_not_visible: int  # by the recipe's crop (`Recipe.min_visible`), before the transform
    dropped_by_transform: int  # boxes the transform did not return (e.g. SanitizeBoundingBoxes)


def target_kind(fn: Any) -> str:
    """TORCHVISION or ALBUMENTATIONS, by `fn`'s type; OptionError for anything else."""
    name = transform_name(fn)
    library = type(fn).__module__.split(".")[0]
    v2 = sys.modules.get("torchvision.transforms.v2")  # loaded wherever a v2 transform was made
    if v2 is not None and isinstance(fn, v2.Transform):  # its own subclasses too
        return TORCHVISION
    albumentations = sys.modules.get("albumentations")
    if albumentations is not None and isinstance(fn, albumentations.BaseCompose):
        library = "albumentations"
    if library == "torchvision":
        raise OptionError(f"transform={name} is a torchvision.transforms (v1) transform, which takes no boxes: use "
                          "torchvision.transforms.v2 with Output(target='boxes')")
    if library == "albumentations":
        processor = getattr(fn, "processors", {}).get("bboxes")
        if processor is None:
            raise OptionError(f"transform={name} has no bbox_params: pass A.Compose([...], bbox_params="
                              "A.BboxParams(format='pascal_voc', label_fields=['labels'])) with Output(target='boxes')")
        params = processor.params
        if params.format not in ALBUMENTATIONS_FORMATS:
            raise OptionError(f"transform={name}: bbox_params format={params.format!r} is not taken here: use one of "
                              f"{', '.join(ALBUMENTATIONS_FORMATS)}")
        others = [field for field in params.label_fields or [] if field != "labels"]
        if others:
            raise OptionError(f"transform={name}: bbox_params label_fields={params.label_fields!r}; iofeed passes "
                              "'labels' only: use label_fields=['labels'] (or none)")
        return ALBUMENTATIONS
    raise OptionError(f"transform={name} cannot take Output(target='boxes')'s boxes (only its type tells how to "
                      f"call it): {KINDS_FIX}")


class TargetTransform(SampleTransform):
    """`transform=` with targets in a worker: seeded, timed and its failures named as a
    `SampleTransform`; called in its kind's shape and its output checked."""

    def __init__(self, fn: Any, output: TransformedImage, **clocks: Any) -> None:
        super().__init__(fn, output, **clocks)
        self.kind = target_kind(fn)

    def with_targets(self, image: np.ndarray, targets: SampleTargets, key: BatchKey, position: int,
                     path: str = "") -> tuple[np.ndarray, SampleTargets]:
        """(image HWC, targets in its pixels), checked: WorkerError naming the transform for an
        image of another shape than the first, or targets that are not boxes, labels and a mask."""
        height, width = image.shape[:2]
        # within the image: albumentations refuses a box a rounding error outside it
        boxes = np.clip(targets.boxes, 0, [width, height, width, height]).astype(np.float32)
        with self.running(path):
            _, seed = self.seeded(key, position)
            call = _torchvision if self.kind == TORCHVISION else _albumentations
            out, got = call(self.fn, image, SampleTargets(boxes, targets.labels, targets.mask), seed & 0xFFFFFFFF,
                            self.name)
            self.raw_shape = torch_shape(out)
            pixels = as_hwc(out)
        if self.output.shape and (pixels.shape != self.output.shape or pixels.dtype != self.output.dtype):
            raise WorkerError(f"{path}: transform {self.name} returned {pixels.shape} {pixels.dtype}, the first image "
                              f"gave {self.output.shape} {self.output.dtype}: return one fixed shape and dtype")
        return pixels, _checked(got, pixels.shape[:2], self.name, targets.mask is not None)


def _checked(got: SampleTargets, size: tuple[int, ...], name: str, masks: bool) -> SampleTargets:
    """`got` as float32 (k, 4) boxes, int64 (k,) labels and a (H, W) uint8 mask, else WorkerError."""
    boxes, labels = np.asarray(got.boxes, np.float32), np.asarray(got.labels)
    if boxes.ndim != 2 or boxes.shape[1] != 4 or labels.shape != (len(boxes),) or labels.dtype.kind not in "iu":
        raise WorkerError(f"transform {name} returned boxes {boxes.shape} and labels {labels.shape} {labels.dtype}: "
                          "return (k, 4) boxes and k integer labels, one per box")
    if masks and (got.mask is None or got.mask.shape != tuple(size)):
        shown = None if got.mask is None else got.mask.shape
        raise WorkerError(f"transform {name} returned masks of shape {shown} for an image {tuple(size)}: transform the "
                          "masks it is given with the image")
    return SampleTargets(boxes, labels.astype(np.int64), got.mask)


def _torchvision(fn: Any, image: np.ndarray, targets: SampleTargets, seed: int, name: str
                 ) -> tuple[Any, SampleTargets]:
    """fn(Image, {"boxes", "labels"[, "masks"]}) -> (image, same dict); seeded by the global RNGs."""
    import torch
    from torchvision import tv_tensors
    from torchvision.transforms.v2 import functional

    height, width = image.shape[:2]
    target: dict[str, Any] = {
        "boxes": tv_tensors.BoundingBoxes(torch.from_numpy(targets.boxes), format="XYXY", canvas_size=(height, width)),
        "labels": torch.from_numpy(targets.labels)}
    if targets.mask is not None:
        numbers = torch.arange(1, len(targets.labels) + 1, dtype=torch.uint8)
        target["masks"] = tv_tensors.Mask((torch.from_numpy(targets.mask)[None] == numbers[:, None, None])
                                          .to(torch.uint8))
    out = fn(tv_tensors.Image(torch.from_numpy(image).permute(2, 0, 1)), target)
    if not (isinstance(out, (tuple, list)) and len(out) == 2 and isinstance(out[1], dict)
            and isinstance(out[1].get("boxes"), tv_tensors.BoundingBoxes) and "labels" in out[1]):
        raise WorkerError(f"transform {name} returned {type(out).__name__}: return (image, target) as given, target "
                          "a dict with 'boxes' (tv_tensors.BoundingBoxes) and 'labels'")
    boxes = functional.convert_bounding_box_format(out[1]["boxes"], new_format=tv_tensors.BoundingBoxFormat.XYXY)
    mask = None
    if targets.mask is not None:
        masks = out[1].get("masks")
        if not isinstance(masks, torch.Tensor) or masks.dim() != 3 or len(masks) != len(boxes):
            raise WorkerError(f"transform {name} returned masks {None if masks is None else tuple(masks.shape)} for "
                              f"{len(boxes)} boxes: return target['masks'] (n, H, W), one per box")
        numbers = torch.arange(1, len(masks) + 1, dtype=torch.uint8)[:, None, None]
        ids = (masks.bool().to(torch.uint8) * numbers).amax(0) if len(masks) else \
            torch.zeros(masks.shape[1:], dtype=torch.uint8)
        mask = ids.numpy()
    return out[0], SampleTargets(boxes.as_subclass(torch.Tensor).numpy(), out[1]["labels"].numpy(), mask)


def _albumentations(fn: Any, image: np.ndarray, targets: SampleTargets, seed: int, name: str
                    ) -> tuple[Any, SampleTargets]:
    """fn(image=, bboxes=, [labels=,] [mask=]) with each box's position as an extra column."""
    params = fn.processors["bboxes"].params
    height, width = image.shape[:2]
    given = np.concatenate([_to_format(targets.boxes, params.format, width, height),
                            np.arange(len(targets.boxes), dtype=np.float32)[:, None]], 1)
    inputs: dict[str, Any] = {"image": image, "bboxes": given}
    if "labels" in (params.label_fields or []):
        inputs["labels"] = targets.labels
    if targets.mask is not None:
        inputs["mask"] = targets.mask
    fn.set_random_seed(seed)
    out = fn(**inputs)
    if not isinstance(out, dict) or "image" not in out or "bboxes" not in out:
        raise WorkerError(f"transform {name} returned {type(out).__name__}: return albumentations' dict with 'image' "
                          "and 'bboxes'")
    pixels = np.asarray(out["image"])
    kept = np.asarray(out["bboxes"], np.float64).reshape(-1, given.shape[1])
    source = np.rint(kept[:, 4]).astype(np.int64)
    boxes = _from_format(kept[:, :4], params.format, pixels.shape[1], pixels.shape[0])
    mask = None
    if targets.mask is not None:
        renumber = np.zeros(256, np.uint8)
        renumber[source + 1] = np.arange(1, len(source) + 1)
        mask = renumber[np.asarray(out.get("mask"), np.uint8)]
    return out["image"], SampleTargets(boxes.astype(np.float32), targets.labels[source], mask)


def _to_format(boxes: np.ndarray, form: str, width: int, height: int) -> np.ndarray:
    """xyxy pixels as albumentations' `form`."""
    b = np.asarray(boxes, np.float64).reshape(-1, 4)
    if form == "pascal_voc":
        return b
    if form == "coco":
        return np.concatenate([b[:, :2], b[:, 2:] - b[:, :2]], 1)
    n = b / [width, height, width, height]
    return n if form == "albumentations" else np.concatenate([(n[:, :2] + n[:, 2:]) / 2, n[:, 2:] - n[:, :2]], 1)


def _from_format(boxes: np.ndarray, form: str, width: int, height: int) -> np.ndarray:
    """albumentations' `form` as xyxy pixels."""
    if form == "pascal_voc":
        return boxes
    if form == "coco":
        return np.concatenate([boxes[:, :2], boxes[:, :2] + boxes[:, 2:]], 1)
    n = boxes if form == "albumentations" else np.concatenate([boxes[:, :2] - boxes[:, 2:] / 2,
                                                               boxes[:, :2] + boxes[:, 2:] / 2], 1)
    return n * [width, height, width, height]


def probe_target_output(fn: Any, image_size: int, masks: bool) -> TransformedImage:
    """What `fn` returns per image for a `probe_image` with one box (and its mask) in the middle,
    run here with the global RNGs restored after; OptionError naming it when it cannot take
    targets, fails with each of PROBE_TRIES seeds, or returns the wrong thing."""
    runner = TargetTransform(fn, TransformedImage((), np.dtype(np.uint8)))
    quarter, three = image_size // 4, image_size - image_size // 4
    mask = None
    if masks:
        mask = np.zeros((image_size, image_size), np.uint8)
        mask[quarter:three, quarter:three] = 1
    targets = SampleTargets(np.array([[quarter, quarter, three, three]], np.float32), np.zeros(1, np.int64), mask)
    what = f"a {image_size}x{image_size}x3 uint8 image with one box"
    with preserved_globals():
        for position in range(PROBE_TRIES):
            try:
                out, _ = runner.with_targets(probe_image(image_size), targets, BatchKey(0, 0, 0, 0), position)
                break
            except SampleError as exc:
                failure: Exception = exc
            except WorkerError as exc:  # the wrong thing returned: no other seed mends that
                raise OptionError(f"transform={runner.name} on {what}: {exc}") from None
        else:
            raise OptionError(f"transform={runner.name} failed on {what}: {failure}") from None
    return checked_output(runner, out, what)
