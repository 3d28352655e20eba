"""Box targets beyond torch/numpy: TensorFlow's ragged boxes, and `transform=` taking and returning
the targets (torchvision v2, albumentations) in the workers. The COCO stand-in fills each object
with its category's colour, so a box, label or mask that drifts from its object shows."""
from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

import iofeed
from helpers import target_transforms as T
from iofeed.errors import OptionError
from iofeed.prepare.run import preprocess
from iofeed.prepare.synth_coco import COLOURS, synth_coco

SIDE, OUT = 96, 64
MASKS = iofeed.Output(target="masks")
# A transform's crop can be a third of the image, resized up by ~2.2x: a box edge and its
# nearest-neighbour mask edge, 1.5 px apart before, are that much further apart after.
ZOOMED = 1.5 * OUT / (0.3 * SIDE)


@pytest.fixture(scope="module")
def coco(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("coco")
    synth_coco(root / "src", images=14, seed=3)
    preprocess(root / "src", root / "coco.iof", workers=1, progress=False, val_fraction=0.3)
    return root / "coco.iof"


def _on_their_objects(image: np.ndarray, boxes: np.ndarray, labels: np.ndarray, ids: np.ndarray,
                      atol: float = 1.5, edge: int = 1) -> int:
    """Asserts box k of `image` bounds the pixels of mask id k + 1 (within `atol` pixels), whose
    inside (`edge` pixels in from the mask's border) is label k's colour; returns how many boxes
    were checked."""
    for k, (box, label) in enumerate(zip(boxes, labels)):
        ys, xs = np.nonzero(ids == k + 1)
        assert len(xs), "a kept box has mask pixels"
        assert np.allclose([xs.min(), ys.min(), xs.max() + 1, ys.max() + 1], box, atol=atol)
        inner = ids == k + 1
        for _ in range(edge):  # the border pixels blend with the surround when resampled
            mask = inner.copy()
            inner[1:] &= mask[:-1]
            inner[:-1] &= mask[1:]
            inner[:, 1:] &= mask[:, :-1]
            inner[:, :-1] &= mask[:, 1:]
        if inner.sum() >= 4:  # an object a few pixels wide is all edge, blended with its surround
            colour = np.abs(image[inner].astype(np.int16) - COLOURS[int(label)]).max(-1) <= 64
            assert colour.mean() > 0.95
    return len(boxes)


def _numpy_epoch(dataset: Path, augment: Any = "uint8", **options: Any
                 ) -> tuple[list[tuple[np.ndarray, dict[str, np.ndarray]]], Any]:
    loader = iofeed.loader(dataset, batch_size=4, framework="numpy", image_size=SIDE, augment=augment,
                           output=MASKS, **options)
    try:
        return [(images.copy(), targets) for images, targets in loader], dict(loader.stats.boxes)
    finally:
        loader.close()


@pytest.mark.tf
def test_tf_boxes_are_ragged_and_lie_on_their_colour_regions(coco: Path) -> None:
    tf = pytest.importorskip("tensorflow")
    dataset = iofeed.loader(coco, batch_size=4, framework="tf", image_size=SIDE, augment="uint8", output=MASKS,
                            workers=2, seed=5)
    spec = dataset.element_spec[1]
    assert isinstance(spec["boxes"], tf.RaggedTensorSpec) and spec["boxes"].dtype == tf.float32
    assert isinstance(spec["labels"], tf.RaggedTensorSpec) and spec["labels"].dtype == tf.int64
    checked = 0
    batches = []
    for images, targets in dataset:
        assert targets["boxes"].shape[1:] == [None, 4] or targets["boxes"].shape.as_list() == [len(images), None, 4]
        batches.append((images.numpy(), targets["boxes"].to_list(), targets["labels"].to_list()))
        for i, image in enumerate(images.numpy()):
            boxes = targets["boxes"][i].numpy().reshape(-1, 4)
            checked += _on_their_objects(image, boxes, targets["labels"][i].numpy(), targets["masks"][i].numpy())
    counted = dict(dataset.iofeed_loader.stats.boxes)
    dataset.iofeed_loader.close()
    assert checked == counted["delivered"] > 0
    numpy_batches, _ = _numpy_epoch(coco, workers=1, seed=5)  # the same geometry whichever framework
    for (images, boxes, labels), (np_images, np_targets) in zip(batches, numpy_batches, strict=True):
        assert np.array_equal(images, np_images)
        for i, count in enumerate(np_targets["counts"]):
            assert np.array_equal(np.reshape(boxes[i], (-1, 4)), np_targets["boxes"][i, :count])
            assert labels[i] == np_targets["labels"][i, :count].tolist()


@pytest.mark.tf
def test_tf_refuses_a_batch_transform_with_box_targets_in_one_line(coco: Path) -> None:
    with pytest.raises(OptionError, match="batch_transform= takes \\(images, labels\\), not the boxes") as raised:
        iofeed.loader(coco, batch_size=2, output=iofeed.Output(target="boxes"), framework="tf",
                      batch_transform=T.image_only)
    assert "\n" not in str(raised.value)


def _transformed_on_their_objects(coco: Path, transform: Any, augment: Any = "uint8", edge: int = 1) -> None:
    batches, counted = _numpy_epoch(coco, augment, workers=2, seed=7, transform=transform, drop_last=False)
    stored = int(np.load(coco / "train-boxes.npz")["offsets"][-1])
    checked = 0
    for images, targets in batches:
        assert images.shape[1:] == (OUT, OUT, 3) and targets["masks"].shape[1:] == (OUT, OUT)
        for i, image in enumerate(images):
            count = int(targets["counts"][i])
            checked += _on_their_objects(image, targets["boxes"][i, :count], targets["labels"][i, :count],
                                         targets["masks"][i], ZOOMED, edge)
    assert checked == counted["delivered"] > 0
    assert checked + counted["dropped_not_visible"] + counted["dropped_by_transform"] == stored  # none lost unsaid


@pytest.mark.torchvision
def test_a_torchvision_v2_transform_moves_boxes_labels_and_masks_with_the_pixels(coco: Path) -> None:
    pytest.importorskip("torchvision")
    _transformed_on_their_objects(coco, T.torchvision_detection(OUT))


@pytest.mark.torchvision
@pytest.mark.parametrize("preset", ["yolo", "torchvision-detection"])
def test_a_transform_after_a_fitted_recipe_keeps_boxes_and_masks_on_their_objects(coco: Path, preset: str) -> None:
    pytest.importorskip("torchvision")
    # Resampled twice (the recipe's resize, then the transform's), an object's border blends two pixels deep.
    _transformed_on_their_objects(coco, T.torchvision_detection(OUT), iofeed.Recipe.preset(preset, normalize=False),
                                  edge=2)


@pytest.mark.albumentations
@pytest.mark.parametrize("form", ["coco", "pascal_voc", "yolo"])
def test_an_albumentations_compose_moves_boxes_labels_and_masks_with_the_pixels(coco: Path, form: str) -> None:
    pytest.importorskip("albumentations")
    _transformed_on_their_objects(coco, T.albumentations_detection(OUT, form))


@pytest.mark.torchvision
@pytest.mark.albumentations
@pytest.mark.parametrize("kind", ["torchvision", "albumentations"])
def test_transformed_targets_are_the_same_for_any_worker_count_and_after_resume(coco: Path, kind: str) -> None:
    pytest.importorskip(kind)
    transform = T.torchvision_detection(OUT) if kind == "torchvision" else T.albumentations_detection(OUT)
    one, _ = _numpy_epoch(coco, workers=1, seed=4, transform=transform)
    two, _ = _numpy_epoch(coco, workers=2, seed=4, transform=transform)
    assert len(one) == len(two) > 1
    for (a_images, a), (b_images, b) in zip(one, two):
        assert np.array_equal(a_images, b_images)
        assert all(np.array_equal(a[key], b[key]) for key in ("boxes", "labels", "counts", "masks"))
    first = iofeed.loader(coco, batch_size=4, framework="numpy", image_size=SIDE, augment="uint8", output=MASKS,
                          workers=1, seed=4, transform=transform)
    next(iter(first))
    state = first.state_dict()
    first.close()
    again = iofeed.loader(coco, batch_size=4, framework="numpy", image_size=SIDE, augment="uint8", output=MASKS,
                          workers=2, seed=4, transform=transform)
    again.load_state_dict(state)
    rest = [(images.copy(), targets) for images, targets in again]
    again.close()
    assert len(rest) == len(one) - 1
    for (a_images, a), (b_images, b) in zip(one[1:], rest):
        assert np.array_equal(a_images, b_images)
        assert all(np.array_equal(a[key], b[key]) for key in ("boxes", "labels", "counts", "masks"))


@pytest.mark.torchvision
def test_torch_targets_of_a_transform_are_tv_tensors_on_its_output_canvas(coco: Path) -> None:
    pytest.importorskip("torchvision")
    from torchvision import tv_tensors

    loader = iofeed.loader(coco, batch_size=4, framework="torch", image_size=SIDE, augment="uint8", output=MASKS,
                           workers=1, seed=3, transform=T.torchvision_detection(OUT))
    images, targets = next(iter(loader))
    loader.close()
    assert tuple(images.shape) == (4, 3, OUT, OUT)
    for target in targets:
        assert isinstance(target["boxes"], tv_tensors.BoundingBoxes) and tuple(target["boxes"].canvas_size) == (OUT,
                                                                                                             OUT)
        assert isinstance(target["masks"], tv_tensors.Mask) and target["masks"].shape[0] == len(target["labels"])


@pytest.mark.torchvision
@pytest.mark.albumentations
@pytest.mark.parametrize(("make", "message"), [
    (lambda: T.ImageOnly(), "transform=ImageOnly on a 96x96x3 uint8 image with one box: transform ImageOnly returned "
                            "Image: return \\(image, target\\) as given"),
    (lambda: __import__("torchvision.transforms", fromlist=["RandomHorizontalFlip"]).RandomHorizontalFlip(),
     "transform=RandomHorizontalFlip is a torchvision.transforms \\(v1\\) transform, which takes no boxes"),
    (lambda: __import__("albumentations").Compose([__import__("albumentations").HorizontalFlip()]),
     "transform=Compose has no bbox_params"),
    (lambda: T.image_only, "transform=helpers.target_transforms.image_only cannot take Output"),
])
def test_a_transform_that_cannot_take_or_returns_wrong_targets_is_named_in_one_line(
        coco: Path, make: Any, message: str) -> None:
    pytest.importorskip("torchvision")
    pytest.importorskip("albumentations")
    with pytest.raises(OptionError, match=message) as raised:
        iofeed.loader(coco, batch_size=2, framework="numpy", image_size=SIDE, output=MASKS, workers=1,
                      transform=make())
    assert "\n" not in str(raised.value)


def _keras(coco: Path, backend: str) -> dict[str, Any]:
    import json
    import os
    import subprocess
    import sys

    tests = Path(__file__).resolve().parent
    env = {**os.environ, "KERAS_BACKEND": backend, "TF_CPP_MIN_LOG_LEVEL": "2",
           "PYTHONPATH": os.pathsep.join([str(tests), str(tests.parent / "src")])}
    run = subprocess.run([sys.executable, "-m", "helpers.keras_boxes", str(coco)], env=env, capture_output=True,
                         text=True, timeout=600)
    assert run.returncode == 0, run.stderr[-3000:]
    out: dict[str, Any] = json.loads(run.stdout.strip().splitlines()[-1])
    return out


@pytest.mark.tf
@pytest.mark.keras
def test_keras_on_tensorflow_gets_the_ragged_boxes_of_the_tf_dataset(coco: Path) -> None:
    pytest.importorskip("keras")
    pytest.importorskip("tensorflow")
    out = _keras(coco, "tensorflow")
    assert out["spec"] == {"boxes": "RaggedTensorSpec", "labels": "RaggedTensorSpec"}
    assert out["images"] == [4, 64, 64, 3] and out["boxes"] == [4, None, 4] and out["rows"] == 4


@pytest.mark.keras
@pytest.mark.jax
def test_keras_on_another_backend_refuses_box_targets_in_one_line(coco: Path) -> None:
    pytest.importorskip("keras")
    pytest.importorskip("jax")
    out = _keras(coco, "jax")
    assert out["refused"].startswith("Output.target='boxes' with framework='keras' is built for Keras' tensorflow")
    assert "'jax'" in out["refused"] and "\n" not in out["refused"]
