"""The box and mask geometry against torchvision v2 on the same crop boxes: crop, resize, flip,
letterbox and the evaluation inverse (boxes within 0.5 px, masks equal)."""
from __future__ import annotations

import numpy as np
import pytest

from iofeed.augment.box_geometry import letterbox_shape, move_boxes, to_original
from iofeed.image.masks import crop_resize_nearest, polygon_mask, rle_encode, rle_mask

torch = pytest.importorskip("torch")
tv = pytest.importorskip("torchvision")
from torchvision import tv_tensors  # noqa: E402
from torchvision.transforms.v2 import InterpolationMode  # noqa: E402
from torchvision.transforms.v2 import functional as F  # noqa: E402


def _random_case(rng: np.random.Generator) -> tuple[int, int, np.ndarray, tuple[int, int, int, int], bool]:
    width, height = int(rng.integers(50, 400)), int(rng.integers(50, 400))
    xy = rng.uniform(0, [width, height], (12, 2))
    wh = rng.uniform(2, [width / 2, height / 2], (12, 2))
    boxes = np.concatenate([xy, np.minimum(xy + wh, [width, height])], 1).astype(np.float32)
    w, h = int(rng.integers(10, width + 1)), int(rng.integers(10, height + 1))
    left, top = int(rng.integers(0, width - w + 1)), int(rng.integers(0, height - h + 1))
    return width, height, boxes, (left, top, left + w, top + h), bool(rng.random() < 0.5)


@pytest.mark.parametrize("seed", range(20))
def test_crop_resize_flip_of_boxes_matches_torchvision(seed: int) -> None:
    rng = np.random.default_rng(seed)
    width, height, boxes, crop, flip = _random_case(rng)
    size = (int(rng.integers(32, 300)), int(rng.integers(32, 300)))
    moved = move_boxes(boxes, np.array([len(boxes)]), np.array([crop], np.float32), np.array([flip]), size,
                       min_visible=0.0)
    theirs = F.resized_crop(tv_tensors.BoundingBoxes(torch.from_numpy(boxes), format="XYXY",
                                                     canvas_size=(height, width)),
                            crop[1], crop[0], crop[3] - crop[1], crop[2] - crop[0], list(size))
    if flip:
        theirs = F.horizontal_flip(theirs)
    expected = theirs.numpy()[moved.kept]
    assert len(moved.kept) and np.abs(moved.boxes - expected).max() <= 0.5


def test_the_visibility_rule_drops_boxes_mostly_outside_the_crop() -> None:
    boxes = np.array([[0, 0, 10, 10], [8, 0, 18, 10], [50, 50, 60, 60]], np.float32)
    moved = move_boxes(boxes, np.array([3]), np.array([[0, 0, 10, 20]], np.float32), np.array([False]), (20, 10),
                       min_visible=0.25)
    assert moved.kept.tolist() == [0] and moved.dropped == 2  # 20% of box 1 is left in; box 2 none


@pytest.mark.parametrize("seed", range(10))
def test_crop_resize_flip_of_masks_equals_torchvision_nearest(seed: int) -> None:
    rng = np.random.default_rng(100 + seed)
    width, height, _, crop, flip = _random_case(rng)
    ids = rng.integers(0, 6, (height // 7 + 1, width // 7 + 1)).astype(np.uint8).repeat(7, 0).repeat(7, 1)
    ids = np.ascontiguousarray(ids[:height, :width])
    size = (int(rng.integers(16, 300)), int(rng.integers(16, 300)))
    ours = crop_resize_nearest(ids, crop, flip, size)
    theirs = F.resized_crop(tv_tensors.Mask(torch.from_numpy(ids)[None]), crop[1], crop[0], crop[3] - crop[1],
                            crop[2] - crop[0], list(size), interpolation=InterpolationMode.NEAREST)
    if flip:
        theirs = F.horizontal_flip(theirs)
    assert np.array_equal(ours, theirs[0].numpy())


@pytest.mark.parametrize("seed", range(10))
def test_letterbox_and_its_inverse_match_torchvision(seed: int) -> None:
    rng = np.random.default_rng(200 + seed)
    width, height, boxes, _, _ = _random_case(rng)
    side = int(rng.integers(64, 512))
    out_h, out_w = letterbox_shape(width, height, side)
    scale = np.array([[out_w / width, out_h / height]])
    moved = move_boxes(boxes, np.array([len(boxes)]), np.array([[0, 0, width, height]], np.float32),
                       np.array([False]), (side, side), 0.0, scale)
    theirs = F.resize(tv_tensors.BoundingBoxes(torch.from_numpy(boxes), format="XYXY", canvas_size=(height, width)),
                      [out_h, out_w])
    assert moved.dropped == 0 and np.abs(moved.boxes - theirs.numpy()).max() <= 0.5
    assert np.abs(to_original(moved.boxes, scale[0]) - boxes).max() <= 0.5
    ids = rng.integers(0, 4, (height, width)).astype(np.uint8)
    mask = F.resize(tv_tensors.Mask(torch.from_numpy(ids)[None]), [out_h, out_w],
                    interpolation=InterpolationMode.NEAREST)
    assert np.array_equal(crop_resize_nearest(ids, (0, 0, width, height), False, (out_h, out_w)), mask[0].numpy())


def test_rle_round_trips_and_a_rectangle_polygon_covers_its_box() -> None:
    mask = polygon_mask([[3.0, 2.0, 9.0, 2.0, 9.0, 7.0, 3.0, 7.0]], 10, 12)
    ys, xs = np.nonzero(mask)
    assert (xs.min(), xs.max() + 1, ys.min(), ys.max() + 1) == (3, 9, 2, 7) and mask.sum() == 30
    assert np.array_equal(rle_mask(rle_encode(mask), 10, 12), mask)
    # pycocotools' string for a 2x2 mask all set: runs [0, 4], one character each
    assert rle_encode(np.ones((2, 2), bool)) == "04"
