"""COCO detection targets end to end: the stand-in's boxes are in its pixels (each object filled
with its category's colour), so a box or mask that drifts from its object, a lost or duplicated
box, or a mislabelled one shows after preprocess and after the loader's crops and flips."""
from __future__ import annotations

import io
import json
import tarfile
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

import iofeed
from helpers.images import interior
from iofeed.augment.box_geometry import to_original
from iofeed.errors import OptionError
from iofeed.image.mask_rows import ROWS_MEMBER, decode_rows
from iofeed.image.masks import polygon_mask, rle_mask
from iofeed.prepare.run import preprocess
from iofeed.prepare.synth_coco import ANNOTATIONS, CATEGORIES, COLOURS, IMAGES_DIR, MALFORMED, synth_coco

SIDE = 96


def _is_colour(pixels: np.ndarray, label: int, tolerance: int = 48) -> np.ndarray:
    return (np.abs(pixels.astype(np.int16) - COLOURS[label]).max(-1) <= tolerance)


@pytest.fixture(scope="module")
def coco(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    root = tmp_path_factory.mktemp("coco")
    synth_coco(root / "src", images=14, seed=3)
    out = root / "coco.iof"
    preprocess(root / "src", out, workers=1, progress=False, val_fraction=0.3)
    return root / "src", out


def test_synth_coco_draws_each_object_in_its_category_colour_inside_its_box(coco: tuple[Path, Path]) -> None:
    src, _ = coco
    document = json.loads((src / ANNOTATIONS).read_text())
    images = {i["id"]: i for i in document["images"]}
    ids = [c for c, _ in CATEGORIES]
    good = [a for a in document["annotations"][: -len(MALFORMED)]]
    assert len(good) > 20 and {a["iscrowd"] for a in good} == {0, 1}
    assert any(isinstance(a["segmentation"], dict) and isinstance(a["segmentation"]["counts"], str) for a in good)
    for ann in good:
        image = images[ann["image_id"]]
        pixels = np.asarray(Image.open(src / IMAGES_DIR / image["file_name"]).convert("RGB"))
        seg = ann["segmentation"]
        mask = (polygon_mask(seg, image["height"], image["width"]) if isinstance(seg, list)
                else rle_mask(seg["counts"], image["height"], image["width"]))
        assert _is_colour(pixels[mask], ids.index(ann["category_id"])).mean() > 0.97
        ys, xs = np.nonzero(mask)
        assert [xs.min(), ys.min(), xs.max() + 1 - xs.min(), ys.max() + 1 - ys.min()] == ann["bbox"]


def test_preprocess_rejects_each_malformed_annotation_with_its_reason(coco: tuple[Path, Path]) -> None:
    _, out = coco
    reasons = [json.loads(line)["reason"] for line in (out / "rejected.jsonl").read_text().splitlines()]
    kinds = sorted(r.split(" (")[0] for r in reasons)
    assert kinds == sorted(["box outside the image", "zero area box", "unknown category", "mask of another size",
                            "annotation of an unknown image", "malformed annotation"])
    manifest = json.loads((out / "iofeed.json").read_text())
    assert manifest["image"]["shorter_side"] == 800  # the detection default (the stand-in is smaller: kept)
    assert set(manifest["targets"]["boxes"]["masks"]) == {"train", "val"}


def _stored_samples(out: Path, split: str) -> list[dict[str, np.ndarray]]:
    samples: dict[str, dict[str, np.ndarray]] = {}
    for shard in sorted(out.glob(f"{split}-*.tar")):
        with tarfile.open(shard) as tar:
            for member in tar.getmembers():
                key, ext = member.name.split(".", 1)
                data = tar.extractfile(member).read()  # type: ignore[union-attr]
                value = (np.asarray(Image.open(io.BytesIO(data)).convert("RGB")) if ext == "jpg" else
                         np.asarray(Image.open(io.BytesIO(data))) if ext == "mask.png" else
                         np.load(io.BytesIO(data)) if ext.endswith("npy") else data)
                samples.setdefault(key, {})[ext] = value
    for sample in samples.values():
        if ROWS_MEMBER in sample:  # row runs (decision 0165): expanded at the image's size
            height, width = sample["jpg"].shape[:2]
            sample["mask"] = decode_rows(bytes(sample.pop(ROWS_MEMBER)), width, height).expand()
    return list(samples.values())


def test_stored_boxes_and_masks_lie_on_their_objects(coco: tuple[Path, Path]) -> None:
    _, out = coco
    samples = _stored_samples(out, "train")
    assert samples and all({"jpg", "mask", "boxes.npy", "labels.npy"} <= set(s) for s in samples)
    for sample in samples:
        for k, (box, label) in enumerate(zip(sample["boxes.npy"], sample["labels.npy"])):
            assert sample["boxes.npy"].dtype == np.float32 and sample["labels.npy"].dtype == np.int64
            ys, xs = np.nonzero(sample["mask"] == k + 1)
            assert np.allclose([xs.min(), ys.min(), xs.max() + 1, ys.max() + 1], box, atol=1.0)
            assert _is_colour(sample["jpg"][ys, xs], int(label)).mean() > 0.95


def _epoch(out: Path, **options: object) -> list[tuple[np.ndarray, dict[str, np.ndarray]]]:
    loader = iofeed.loader(out, batch_size=4, framework="numpy", image_size=SIDE, augment="uint8",
                           **options)  # type: ignore[arg-type]
    try:
        return [(images.copy(), targets) for images,
                targets in loader] + [({}, loader.stats.boxes)]  # type: ignore[list-item]
    finally:
        loader.close()


def test_loader_boxes_and_masks_follow_every_crop_and_flip(coco: tuple[Path, Path]) -> None:
    _, out = coco
    *batches, (_, counted) = _epoch(out, output=iofeed.Output(target="masks"), workers=2, seed=5)
    table = np.load(out / "train-boxes.npz")
    delivered = 0
    for images, targets in batches:
        for i in range(len(images)):
            for k in range(int(targets["counts"][i])):
                box, label = targets["boxes"][i, k], int(targets["labels"][i, k])
                ys, xs = np.nonzero(targets["masks"][i] == k + 1)
                assert len(xs), "a kept box has mask pixels"
                assert np.allclose([xs.min(), ys.min(), xs.max() + 1, ys.max() + 1], box, atol=1.5)
                inner = interior(targets["masks"][i] == k + 1)
                if inner.sum() >= 4:  # an object a few pixels wide is all edge, blended with its surround
                    assert _is_colour(images[i][inner], label, 64).mean() > 0.95
                delivered += 1
    assert counted["delivered"] == delivered > 0
    assert delivered + counted["dropped_not_visible"] <= int(table["offsets"][-1])


def test_box_count_adds_up_over_an_epoch(coco: tuple[Path, Path]) -> None:
    _, out = coco
    loader = iofeed.loader(out, batch_size=3, framework="numpy", image_size=SIDE, output=iofeed.Output(target="boxes"),
                           drop_last=False, workers=1)
    offsets = np.load(out / "train-boxes.npz")["offsets"]
    stored = 0
    for _ in loader:
        stored += int((offsets[loader.last_indices + 1] - offsets[loader.last_indices]).sum())
    assert loader.stats.boxes["delivered"] + loader.stats.boxes["dropped_not_visible"] == stored
    loader.close()


def test_boxes_are_the_same_whatever_the_worker_count(coco: tuple[Path, Path]) -> None:
    _, out = coco
    boxes = iofeed.Output(target="boxes")
    one, two = _epoch(out, output=boxes, workers=1, seed=9), _epoch(out, output=boxes, workers=2, seed=9)
    for (a_images, a), (b_images, b) in zip(one[:-1], two[:-1]):
        assert np.array_equal(a_images, b_images)
        assert all(np.array_equal(a[key], b[key]) for key in ("boxes", "labels", "counts"))


def test_resume_gives_the_same_boxes(coco: tuple[Path, Path]) -> None:
    _, out = coco
    whole = _epoch(out, output=iofeed.Output(target="boxes"), workers=1, seed=4)[:-1]
    first = iofeed.loader(out, batch_size=4, framework="numpy", image_size=SIDE, augment="uint8",
                          output=iofeed.Output(target="boxes"),
                          workers=1, seed=4)
    next(iter(first))
    state = first.state_dict()
    first.close()
    again = iofeed.loader(out, batch_size=4, framework="numpy", image_size=SIDE, augment="uint8",
                          output=iofeed.Output(target="boxes"),
                          workers=1, seed=4)
    again.load_state_dict(state)
    rest = [targets for _, targets in again]
    again.close()
    assert len(rest) == len(whole) - 1
    for (_, expected), got in zip(whole[1:], rest):
        assert np.array_equal(expected["boxes"], got["boxes"]) and np.array_equal(expected["labels"], got["labels"])


def test_evaluation_letterboxes_and_maps_boxes_back_to_the_annotations(coco: tuple[Path, Path]) -> None:
    src, out = coco
    document = json.loads((src / ANNOTATIONS).read_text())
    names = [json.loads(line) for line in (out / "val-samples.sources.jsonl").read_text().splitlines()]
    by_name = {i["file_name"]: i["id"] for i in document["images"]}
    good = document["annotations"][: -len(MALFORMED)]
    loader = iofeed.loader(out, split="val", batch_size=2, framework="numpy", image_size=SIDE,
                           output=iofeed.Output(target="boxes"),
                           workers=1)
    seen = 0
    for _, targets in loader:
        for i, sample in enumerate(loader.last_indices):
            back = to_original(targets["boxes"][i, : targets["counts"][i]], targets["scale"][i])
            image_id = by_name[names[int(sample)]]
            xywh = np.array([a["bbox"] for a in good if a["image_id"] == image_id], np.float64).reshape(-1, 4)
            expected = np.concatenate([xywh[:, :2], xywh[:, :2] + xywh[:, 2:]], 1)
            assert np.allclose(back, expected, atol=0.5)
            seen += len(back)
    assert seen and loader.stats.boxes["dropped_not_visible"] == 0  # nothing cropped away in evaluation
    loader.close()


@pytest.mark.parametrize("engine", ["dali", "nvjpeg"])
def test_engines_without_box_geometry_refuse_targets_in_one_line(coco: tuple[Path, Path], engine: str) -> None:
    _, out = coco
    with pytest.raises(OptionError, match=f"target='boxes': engine='{engine}' does not move boxes") as raised:
        iofeed.loader(out, batch_size=2, output=iofeed.Output(target="boxes"), engine=engine)
    assert "\n" not in str(raised.value)


def test_boxes_of_a_dataset_without_them_are_refused(tmp_path: Path) -> None:
    from iofeed.prepare.synth import synth_caltech256

    synth_caltech256(tmp_path / "c", per_class=1, workers=1, progress=False)
    preprocess(tmp_path / "c", tmp_path / "c.iof", workers=1, progress=False)
    with pytest.raises(OptionError, match="holds no boxes"):
        iofeed.loader(tmp_path / "c.iof", batch_size=2, output=iofeed.Output(target="boxes"), framework="numpy")


@pytest.mark.torch
def test_torch_targets_are_tv_tensors_one_dict_per_image(coco: tuple[Path, Path]) -> None:
    pytest.importorskip("torchvision")
    from torchvision import tv_tensors

    _, out = coco
    numpy_batch = _epoch(out, output=iofeed.Output(target="masks"), workers=1, seed=2)[0][1]
    loader = iofeed.loader(out, batch_size=4, framework="torch", image_size=SIDE, augment="uint8",
                           output=iofeed.Output(target="masks"),
                           workers=1, seed=2)
    images, targets = next(iter(loader))
    loader.close()
    assert tuple(images.shape) == (4, 3, SIDE, SIDE) and len(targets) == 4
    for i, target in enumerate(targets):
        count = int(numpy_batch["counts"][i])
        assert isinstance(target["boxes"], tv_tensors.BoundingBoxes) and target["boxes"].format.name == "XYXY"
        assert tuple(target["boxes"].canvas_size) == (SIDE, SIDE)
        assert np.array_equal(target["boxes"].numpy(), numpy_batch["boxes"][i, :count])
        assert target["labels"].dtype.is_floating_point is False and target["labels"].tolist() == \
            numpy_batch["labels"][i, :count].tolist()
        assert isinstance(target["masks"], tv_tensors.Mask) and tuple(target["masks"].shape) == (count, SIDE, SIDE)
        for k in range(count):
            assert np.array_equal(target["masks"][k].numpy() == 1, numpy_batch["masks"][i] == k + 1)


def test_overwrite_replaces_a_detection_dataset_and_keeps_a_users_boxes_file(coco: tuple[Path, Path],
                                                                            tmp_path: Path) -> None:
    """The boxes and masks files the manifest lists are iofeed's: `--overwrite` replaces them; a
    user's `old-boxes.npz` beside them is not, and refuses it, named, with its bytes kept."""
    import shutil

    from iofeed.errors import OptionError

    src, out = coco
    copy = tmp_path / "coco.iof"
    shutil.copytree(out, copy)
    assert {"train-boxes.npz", "val-boxes.npz"} <= {p.name for p in copy.iterdir()}
    preprocess(src, copy, workers=1, progress=False, val_fraction=0.3, overwrite=True)
    (copy / "old-boxes.npz").write_bytes(b"mine")
    with pytest.raises(OptionError, match="old-boxes.npz, which iofeed did not write"):
        preprocess(src, copy, workers=1, progress=False, val_fraction=0.3, overwrite=True)
    assert (copy / "old-boxes.npz").read_bytes() == b"mine" and (copy / "train-boxes.npz").exists()


@pytest.mark.torch
def test_an_id_map_splits_alike_on_the_host_and_on_a_device() -> None:
    """The CPU splits instance-id maps with numpy (torch's broadcast uint8 comparison was ~10x slower
    there), a GPU with torch: both give mask k = pixels of id k + 1, and no mask for an absent id."""
    import torch

    from iofeed.adapters.box_batches import split_on_device, split_on_host

    ids = np.random.default_rng(0).integers(0, 6, (40, 56)).astype(np.uint8)
    ids[ids == 3] = 0  # an id with no pixel left
    host, device = split_on_host(ids, 6), split_on_device(torch.from_numpy(ids), 6).numpy()
    assert host.dtype == device.dtype == np.uint8 and host.shape == device.shape == (6, 40, 56)
    assert np.array_equal(host, device) and host[2].sum() == 0 and host[5].sum() == 0
    for k in range(6):
        assert np.array_equal(host[k] == 1, ids == k + 1)


def test_torch_splits_by_each_kept_boxs_id_as_numpy_renumbers_after_a_drop() -> None:
    """A batch whose crops dropped boxes: torch's per-object masks (split by each kept box's id in
    the workers' map, no renumbering) are numpy's renumbered map, box k = id k + 1, mask for mask."""
    import torch

    from iofeed.adapters.box_batches import BoxBatch, as_numpy, as_torch, split_on_device
    from iofeed.augment.box_geometry import MovedBoxes

    rng = np.random.default_rng(7)
    maps = rng.integers(0, 6, (3, 24, 20)).astype(np.uint8)  # ids 1..5 on each image
    source = np.asarray([0, 2, 4, 1, 3, 4])  # image 0 keeps boxes 0, 2, 4; image 1: none; image 2: 1, 3, 4
    offsets = np.asarray([0, 3, 3, 6])
    kept = np.arange(6)
    batch = BoxBatch(MovedBoxes(rng.random((6, 4)).astype(np.float32), offsets, source, kept, 4),
                     np.arange(6, dtype=np.int64), maps.copy(), None, (24, 20), mask_ids=(source + 1).astype(np.uint8))
    torch_targets = as_torch(batch, "cpu")
    renumbered = as_numpy(batch)["masks"]
    for i, target in enumerate(torch_targets):
        split = target["masks"].numpy()
        assert split.shape == (offsets[i + 1] - offsets[i], 24, 20)
        for k, box in enumerate(range(offsets[i], offsets[i + 1])):
            assert np.array_equal(split[k] == 1, maps[i] == source[box] + 1)
            assert np.array_equal(split[k] == 1, renumbered[i] == k + 1)
        on_device = split_on_device(torch.from_numpy(maps[i]), torch.from_numpy((source[offsets[i]:offsets[i + 1]] + 1)
                                                                                .astype(np.uint8)))
        assert np.array_equal(on_device.numpy(), split)  # a GPU's split, given the batch's ids as a tensor
    assert not (renumbered[1] > 0).any() and set(np.unique(renumbered[0])) <= {0, 1, 2, 3}
