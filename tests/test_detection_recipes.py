"""Detection training geometry that keeps the image's aspect (`Recipe(fit=...)`, the "yolo", "detr" and
"torchvision-detection" presets): the draws against torchvision v2's `ScaleJitter` and
`RandomShortestSize`, the boxes and masks against torchvision v2 on the same draws (resized crop,
pad, flip: boxes within 0.5 px, masks equal), and end to end on `synth coco` and a semantic set:
boxes on their objects' colours, the padding's value, the same batches for any worker count and
on resume, every box counted, and the refusals in one line."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import iofeed
from helpers.adversarial_targets import build_targets
from iofeed.augment.box_geometry import move_boxes
from iofeed.augment.fitting import FITS, place, render_mask, resized_size
from iofeed.errors import OptionError
from iofeed.image.masks import crop_resize_nearest
from iofeed.prepare.run import preprocess
from iofeed.prepare.synth_coco import COLOURS, synth_coco

torch = pytest.importorskip("torch")
pytest.importorskip("torchvision")
from torchvision import tv_tensors  # noqa: E402
from torchvision.transforms import v2  # noqa: E402
from torchvision.transforms.v2 import InterpolationMode  # noqa: E402
from torchvision.transforms.v2 import functional as F  # noqa: E402

SIDE = 96
FITTED = [fit for fit in FITS if fit != "crop"]


@pytest.mark.parametrize("seed", range(30))
def test_the_scale_draw_is_torchvisions_scale_jitter_and_shortest_size(seed: int) -> None:
    rng = np.random.default_rng(seed)
    width, height, side = int(rng.integers(20, 900)), int(rng.integers(20, 900)), int(rng.integers(64, 1100))
    image = torch.zeros((1, height, width), dtype=torch.uint8)
    torch.manual_seed(seed)
    jittered = v2.ScaleJitter((side, side), scale_range=(0.1, 2.0))(image)
    torch.manual_seed(seed)
    factor = float(0.1 + torch.rand(1) * (2.0 - 0.1))  # the one draw ScaleJitter makes
    assert resized_size(width, height, side, "pad", factor) == tuple(jittered.shape[1:])
    shorter = int(rng.integers(32, 1000))
    expected = v2.RandomShortestSize(min_size=[shorter])(image)
    assert resized_size(width, height, side, "shorter_side", shorter / side) == tuple(expected.shape[1:])


def _case(rng: np.random.Generator) -> tuple[int, int, np.ndarray, np.ndarray]:
    width, height = int(rng.integers(40, 400)), int(rng.integers(40, 400))
    xy = rng.uniform(0, [width, height], (12, 2))
    wh = rng.uniform(2, [width / 2, height / 2], (12, 2))
    boxes = np.concatenate([xy, np.minimum(xy + wh, [width, height])], 1).astype(np.float32)
    ids = rng.integers(0, 6, (height // 5 + 1, width // 5 + 1)).astype(np.uint8).repeat(5, 0).repeat(5, 1)
    return width, height, boxes, np.ascontiguousarray(ids[:height, :width])


def _torchvision(thing: object, placement: object, side: int, nearest: bool = False) -> np.ndarray:
    """torchvision v2 on the same draw: the cut box resized into its rectangle, padded to the canvas, flipped."""
    left, top, right, bottom = (int(v) for v in placement.box)  # type: ignore[attr-defined]
    x0, y0, x1, y1 = placement.placed  # type: ignore[attr-defined]
    mode = InterpolationMode.NEAREST if nearest else InterpolationMode.BILINEAR
    out = F.resized_crop(thing, top, left, bottom - top, right - left, [y1 - y0, x1 - x0], interpolation=mode)
    out = F.pad(out, [x0, y0, side - x1, side - y1], fill=0)
    if placement.flip:  # type: ignore[attr-defined]
        out = F.horizontal_flip(out)
    return np.asarray(out.numpy())


@pytest.mark.parametrize("fit", FITTED)
@pytest.mark.parametrize("seed", range(12))
def test_fitted_boxes_and_masks_match_torchvision_on_the_same_draws(fit: str, seed: int) -> None:
    rng = np.random.default_rng(1000 * FITS.index(fit) + seed)
    width, height, boxes, ids = _case(rng)
    side = int(rng.integers(32, 300))
    placement = place(width, height, side, fit, (0.3, 2.5), True, rng.random(4))
    moved = move_boxes(boxes, np.array([len(boxes)]), np.array([placement.box], np.float32),
                       np.array([placement.flip]), (side, side), 0.0, placed=np.array([placement.placed]))
    theirs = _torchvision(tv_tensors.BoundingBoxes(torch.from_numpy(boxes), format="XYXY",
                                                   canvas_size=(height, width)), placement, side)
    # the boxes torchvision leaves with any area are the ones kept (min_visible=0), each within 0.5 px
    assert np.array_equal(moved.kept, np.flatnonzero((theirs[:, 2] - theirs[:, 0]) * (theirs[:, 3] - theirs[:, 1]) > 0))
    assert np.abs(moved.boxes - theirs[moved.kept]).max(initial=0.0) <= 0.5
    ours = np.full((side, side), 7, np.uint8)  # whatever the slot held before: all overwritten
    render_mask(ids, placement, placement.box, ours)
    assert np.array_equal(ours, _torchvision(tv_tensors.Mask(torch.from_numpy(ids)[None]), placement, side,
                                             nearest=True)[0])


def test_letterbox_centres_and_pad_and_shorter_side_keep_the_top_left() -> None:
    u = np.array([0.0, 0.0, 0.0, 0.9])  # smallest factor, no flip
    assert place(200, 100, 100, "letterbox", (0.5, 0.5), True, u).placed == (25, 37, 75, 62)
    assert place(200, 100, 100, "pad", (0.5, 0.5), True, u).placed == (0, 0, 50, 25)
    # the shorter side to 100 x 1.0: 200 x 100, a 100 px window from the left, the whole height
    assert place(200, 100, 100, "shorter_side", (1.0, 1.0), True, np.array([0, 0.999, 0, 0.9])).box == (
        100.0, 0.0, 200.0, 100.0)


def test_presets_say_what_they_mirror() -> None:
    yolo, detr, lsj = (iofeed.Recipe.preset(n) for n in ("yolo", "detr", "torchvision-detection"))
    assert (yolo.fit, yolo.scale_jitter, yolo.fill, yolo.min_visible) == ("letterbox", (0.5, 1.5), 114, 0.1)
    assert (detr.fit, detr.scale_jitter, detr.min_visible) == ("shorter_side", (0.6, 1.0), 0.0)
    assert (lsj.fit, lsj.scale_jitter, lsj.fill) == ("pad", (0.1, 2.0), (123, 117, 104))


@pytest.mark.parametrize(("change", "named"), [({"fit": "stretch"}, "fit='stretch'"),
                                               ({"scale_jitter": (2.0, 1.0)}, "scale_jitter"),
                                               ({"scale_jitter": (0.0, 1.0)}, "scale_jitter"),
                                               ({"fill": 300}, "fill"), ({"fill": (1, 2)}, "fill")])
def test_bad_fit_fields_are_refused_naming_them(change: dict[str, object], named: str) -> None:
    with pytest.raises(OptionError, match=named) as raised:
        iofeed.Recipe(**change)  # type: ignore[arg-type]
    assert "\n" not in str(raised.value)


@pytest.fixture(scope="module")
def coco(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("coco")
    synth_coco(root / "src", images=14, seed=3)
    preprocess(root / "src", root / "coco.iof", workers=1, progress=False, val_fraction=0.3)
    return root / "coco.iof"


def _epoch(out: Path, recipe: iofeed.Recipe, target: str = "masks", workers: int = 1, seed: int = 0
           ) -> tuple[list[tuple[np.ndarray, Any]], dict[str, int]]:
    loader = iofeed.loader(out, batch_size=4, framework="numpy", image_size=SIDE, augment=recipe,
                           output=iofeed.Output(target=target), workers=workers, seed=seed)
    try:
        return [(images.copy(), targets) for images, targets in loader], dict(loader.stats.boxes)
    finally:
        loader.close()


@pytest.mark.parametrize("preset", ["yolo", "detr", "torchvision-detection"])
def test_preset_boxes_and_masks_lie_on_their_objects(coco: Path, preset: str) -> None:
    batches, counted = _epoch(coco, iofeed.Recipe.preset(preset, normalize=False), workers=2, seed=5)
    delivered = 0
    for images, targets in batches:
        for i in range(len(images)):
            for k in range(int(targets["counts"][i])):
                box, label = targets["boxes"][i, k], int(targets["labels"][i, k])
                delivered += 1
                if min(box[2] - box[0], box[3] - box[1]) < 2:
                    continue  # scaled to 1/10 or cut to a sliver: nearest-neighbour may sample none of it
                ys, xs = np.nonzero(targets["masks"][i] == k + 1)
                assert len(xs), "a kept box has mask pixels"
                assert np.allclose([xs.min(), ys.min(), xs.max() + 1, ys.max() + 1], box, atol=1.5)
                inner = targets["masks"][i] == k + 1
                for axis in (0, 1):
                    inner = inner & np.roll(inner, 1, axis) & np.roll(inner, -1, axis)
                if inner.sum() >= 4:
                    assert (np.abs(images[i][inner].astype(np.int16) - COLOURS[label]).max(-1) <= 64).mean() > 0.95
    offsets = np.load(coco / "train-boxes.npz")["offsets"]
    assert counted["delivered"] == delivered > 0
    assert delivered + counted["dropped_not_visible"] <= int(offsets[-1])


@pytest.mark.parametrize(("fit", "fill"), [("letterbox", 114), ("pad", (1, 2, 250))])
def test_a_small_image_sits_on_the_fill_colour_where_its_fit_puts_it(coco: Path, fit: str,
                                                                     fill: int | tuple[int, int, int]) -> None:
    recipe = iofeed.Recipe(fit=fit, scale_jitter=(0.5, 0.5), flip=False, fill=fill, normalize=False)
    loader = iofeed.loader(coco, batch_size=4, framework="numpy", image_size=SIDE, augment=recipe, workers=1,
                           output=iofeed.Output(target="masks"), seed=1)
    seen = 0
    try:
        for images, targets in loader:
            for i in range(len(images)):
                ys, xs = np.nonzero((images[i] != fill).any(-1))
                placed = (xs.min(), ys.min(), xs.max() + 1, ys.max() + 1)
                outside = np.ones((SIDE, SIDE), bool)
                outside[placed[1]:placed[3], placed[0]:placed[2]] = False
                assert (images[i][outside] == fill).all() and (targets["masks"][i][outside] == 0).all()
                # the longer side is half the canvas: centred (letterbox) or at the top left (pad)
                assert max(placed[2] - placed[0], placed[3] - placed[1]) == SIDE // 2
                if fit == "letterbox":
                    assert abs((placed[0] + placed[2]) - SIDE) <= 1 and abs((placed[1] + placed[3]) - SIDE) <= 1
                else:
                    assert placed[:2] == (0, 0)
                boxes = targets["boxes"][i, : targets["counts"][i]]
                assert (boxes[:, :2] >= np.array(placed[:2]) - 0.5).all()
                assert (boxes[:, 2:] <= np.array(placed[2:]) + 0.5).all()
                seen += len(boxes)
    finally:
        loader.close()
    assert seen and loader.stats.boxes["dropped_not_visible"] == 0  # the whole image is on the canvas


@pytest.mark.parametrize("preset", ["yolo", "detr"])
def test_fitted_batches_are_the_same_for_any_worker_count_and_on_resume(coco: Path, preset: str) -> None:
    recipe = iofeed.Recipe.preset(preset, normalize=False)
    one, _ = _epoch(coco, recipe, "boxes", workers=1, seed=9)
    two, _ = _epoch(coco, recipe, "boxes", workers=2, seed=9)
    for (a_images, a), (b_images, b) in zip(one, two, strict=True):
        assert np.array_equal(a_images, b_images)
        assert all(np.array_equal(a[key], b[key]) for key in ("boxes", "labels", "counts"))
    first = iofeed.loader(coco, batch_size=4, framework="numpy", image_size=SIDE, augment=recipe, workers=1, seed=9,
                          output=iofeed.Output(target="boxes"))
    next(iter(first))
    state = first.state_dict()
    first.close()
    again = iofeed.loader(coco, batch_size=4, framework="numpy", image_size=SIDE, augment=recipe, workers=2, seed=9,
                          output=iofeed.Output(target="boxes"))
    again.load_state_dict(state)
    rest = [(images.copy(), targets) for images, targets in again]
    again.close()
    assert len(rest) == len(one) - 1
    for (images, expected), (got_images, got) in zip(one[1:], rest, strict=True):
        assert np.array_equal(images, got_images) and np.array_equal(expected["boxes"], got["boxes"])


def test_every_box_is_delivered_or_counted_dropped(coco: Path) -> None:
    recipe = iofeed.Recipe.preset("torchvision-detection", normalize=False)
    loader = iofeed.loader(coco, batch_size=3, framework="numpy", image_size=SIDE, augment=recipe, workers=1,
                           output=iofeed.Output(target="boxes"), drop_last=False, seed=3)
    offsets = np.load(coco / "train-boxes.npz")["offsets"]
    stored = 0
    for _ in loader:
        stored += int((offsets[loader.last_indices + 1] - offsets[loader.last_indices]).sum())
    assert loader.stats.boxes["delivered"] + loader.stats.boxes["dropped_not_visible"] == stored > 0
    loader.close()


def test_semantic_maps_pad_with_255_and_are_exact(tmp_path: Path) -> None:
    source = build_targets(tmp_path / "src", "clean", "segmentation")
    out = tmp_path / "ds.iof"
    preprocess(str(source.spec), out, workers=1, progress=False, val_fraction=0)
    names = [json.loads(line) for line in (out / "train-samples.sources.jsonl").read_text().splitlines()]
    recipe = iofeed.Recipe(fit="letterbox", scale_jitter=(0.5, 0.5), flip=False, normalize=False)
    loader = iofeed.loader(out, batch_size=4, framework="numpy", image_size=SIDE, augment=recipe, workers=1,
                           output=iofeed.Output(target="masks"), drop_last=False)
    compared = 0
    try:
        for _, targets in loader:
            for i, row in enumerate(loader.last_indices):
                label_map = source.maps[_name(source.maps, names[int(row)])]
                height, width = label_map.shape
                shape = resized_size(width, height, SIDE, "letterbox", 0.5)
                top, left = (SIDE - shape[0]) // 2, (SIDE - shape[1]) // 2
                expected = np.full((SIDE, SIDE), 255, np.uint8)
                expected[top:top + shape[0], left:left + shape[1]] = crop_resize_nearest(
                    label_map, (0, 0, width, height), False, shape)
                assert np.array_equal(targets["masks"][i], expected)
                compared += 1
    finally:
        loader.close()
    assert compared == len(names)


def _name(maps: dict[str, np.ndarray], stored: str) -> str:
    """The builder's name of a stored sample (the stored one may be shortened)."""
    found = [n for n in maps if n.endswith(stored) or stored.endswith(n)]
    assert len(found) == 1, (stored, found)
    return found[0]


def test_classification_with_a_fit_is_refused_in_one_line(coco: Path) -> None:
    with pytest.raises(OptionError, match="Recipe fit='letterbox' places a detection image") as raised:
        iofeed.loader(coco, batch_size=2, framework="numpy", augment="yolo")
    assert "\n" not in str(raised.value)


@pytest.mark.parametrize("engine", ["dali", "nvjpeg"])
def test_engines_that_cannot_fit_refuse_naming_the_field(coco: Path, engine: str) -> None:
    with pytest.raises(OptionError, match=f"Recipe fit='pad': engine='{engine}' cannot") as raised:
        iofeed.loader(coco, batch_size=2, engine=engine, augment="torchvision-detection",
                      output=iofeed.Output(target="boxes"))
    assert "\n" not in str(raised.value)
