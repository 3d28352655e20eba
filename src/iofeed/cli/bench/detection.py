"""The detection pair's baseline: torchvision `CocoDetection` wrapped for the v2 transforms, the
detection recipe (random-resized crop as iofeed's "detection" preset draws it, flip, resize to a
fixed square, normalise, `SanitizeBoundingBoxes`) and a DataLoader, boxes and labels (and
per-object masks where the line asks for them) in one dict per image, as torchvision's detection
models take them.

It reads the COCO folder as a torchvision user has it: JPEG files and the instances JSON, parsed
by pycocotools, each mask decoded per object at the image's size. The annotations are those
`iofeed preprocess` stores (the ones it rejects, such as the stand-in's malformed ones, left
out, as a user cleans them before training), and images left without one are dropped as
torchvision's reference script drops them."""
from __future__ import annotations

import contextlib
import io
import json
import multiprocessing
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from ...adapters.normalize import IMAGENET_MEAN, IMAGENET_STD
from ...augment.recipe import PRESETS
from ...errors import SourceError
from ...prepare.sources.coco import coco_files, folder_of, stored_annotations
from .feeds import FeedSpec

PREFETCH_FACTOR = 2  # the DataLoader's default
RECIPE = PRESETS["detection"]  # iofeed's side runs this preset; the baseline draws its crops alike


def detection_transforms(image_size: int) -> Any:
    """torchvision's v2 detection recipe on (PIL image, target dict): normalised float CHW, targets moved."""
    import torch
    from torchvision.transforms import v2

    return v2.Compose([
        v2.RandomResizedCrop((image_size, image_size), scale=RECIPE.scale, ratio=RECIPE.ratio, antialias=True),
        v2.RandomHorizontalFlip(), v2.PILToTensor(), v2.ToDtype(torch.float32, scale=True),
        v2.Normalize(IMAGENET_MEAN, IMAGENET_STD), v2.SanitizeBoundingBoxes(),
    ])


def collate(samples: list[tuple[Any, dict[str, Any]]]) -> tuple[Any, list[dict[str, Any]]]:
    """(images stacked (B, 3, H, W), one target dict per image): the detection models' form."""
    import torch

    images, targets = zip(*samples)
    return torch.stack(images), list(targets)


def baseline_annotations(root: Path, out: Path) -> tuple[Path, Path]:
    """(instances JSON for the baseline, written to `out`, and the folder of the images): the
    COCO folder's annotations that `iofeed preprocess` stores, every image entry kept."""
    files = coco_files(root)
    if not files:
        raise SourceError(f"{root}: no COCO instances JSON (the detection baseline reads a COCO folder: make a "
                          "stand-in with `iofeed synth coco DIR`)")
    document = json.loads(files[0].read_bytes())
    document["annotations"] = stored_annotations(document)
    first = next((i["file_name"] for i in document["images"] if isinstance(i, dict) and "file_name" in i), "")
    images = folder_of(root, first)
    if images is None:
        raise SourceError(f"{root}: the images its annotations name (e.g. {first}) are not there")
    out.write_text(json.dumps(document), encoding="utf-8")
    return out, images


class CocoDetectionFeed:
    """torchvision `CocoDetection` + `wrap_dataset_for_transforms_v2` + the v2 detection recipe +
    DataLoader (forkserver workers); masks when the line's `masks` keyword says so."""

    def __init__(self, spec: FeedSpec) -> None:
        import torch
        from torchvision import datasets

        keys = ("boxes", "labels", "masks") if spec.entry.keywords.get("masks") else ("boxes", "labels")
        torch.manual_seed(spec.seed)
        self._device = torch.device(spec.device)
        with tempfile.TemporaryDirectory(prefix="iofeed-coco-") as temporary:
            annotations, images = baseline_annotations(Path(spec.source), Path(temporary) / "instances.json")
            with contextlib.redirect_stdout(io.StringIO()):  # pycocotools prints its timings
                dataset = datasets.CocoDetection(str(images), str(annotations),
                                                 transforms=detection_transforms(spec.image_size))
        dataset.ids = [i for i in dataset.ids if dataset.coco.getAnnIds(imgIds=i)]
        wrapped = datasets.wrap_dataset_for_transforms_v2(dataset, target_keys=keys)
        context = multiprocessing.get_context("forkserver")
        context.set_forkserver_preload(["torch", "torchvision.datasets", "torchvision.transforms.v2",
                                        "pycocotools.coco", "PIL.Image"])
        self._loader: Any = torch.utils.data.DataLoader(
            wrapped, batch_size=spec.batch_size, shuffle=True, drop_last=True, num_workers=spec.workers,
            multiprocessing_context=context, persistent_workers=True, prefetch_factor=PREFETCH_FACTOR,
            pin_memory=self._device.type == "cuda", collate_fn=collate)
        self._epoch: Any = iter(self._loader)  # starts the workers now, beside the other hosts' start-ups
        self.capacity = spec.workers * PREFETCH_FACTOR
        self.settings: dict[str, Any] = {"workers": spec.workers, "prefetch_factor": PREFETCH_FACTOR,
                                         "samples": len(dataset), "target_keys": list(keys)}

    def batches(self) -> Iterator[tuple[Any, Any]]:
        while True:
            for images, targets in self._epoch:
                if self._device.type != "cpu":
                    targets = [{key: value.to(self._device, non_blocking=True) for key, value in target.items()}
                               for target in targets]
                yield images.to(self._device, non_blocking=True), targets
            self._epoch = iter(self._loader)  # persistent workers: the same processes

    def close(self) -> None:
        self._loader = self._epoch = None  # persistent workers stop with their iterator
