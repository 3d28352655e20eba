"""The detection and segmentation sources (COCO, YOLO, WebDataset boxes, PNG label maps) end to end,
clean and damaged (`helpers/adversarial_targets.py`): `preprocess` recognises each by content,
rejects each bad annotation with its reason (or refuses the run in one line), stores every good
object exactly, and the loader's boxes lie on their objects' pixels within 0.5 px after the
training crops and flips; semantic masks arrive as class ids, exact in evaluation."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

import iofeed
from helpers.adversarial import BUILDERS
from helpers.adversarial_targets import BACKGROUND, DAMAGES, SEMANTIC_CLASSES, TargetSource, build_targets, colour_of
from iofeed.errors import IofeedError, OptionError
from iofeed.image.masks import crop_resize_nearest
from iofeed.prepare.run import preprocess

SIDE = 96
CASES = [(kind, damage) for kind, damages in DAMAGES.items() for damage in damages]


def _names(out: Path) -> list[str]:
    return [json.loads(line) for line in (out / "train-samples.sources.jsonl").read_text().splitlines()]


def _source_name(source: TargetSource, stored: str) -> str:
    """The builder's name of a stored sample (shard paths may be shown shortened)."""
    found = [n for n in {**source.boxes, **source.maps} if n.endswith(stored) or stored.endswith(n)
             or n.split("#")[-1] == stored.split("#")[-1] and "#" in stored]
    assert len(found) == 1, (stored, found)
    return found[0]


def coverage(image: np.ndarray, label: int) -> np.ndarray:
    """Per pixel, the share of `label`'s colour in a mix with the background (linear in the pixels,
    so a resize or a crop keeps each row's sum: an edge is found to a fraction of a pixel)."""
    bg, colour = np.asarray(BACKGROUND, np.float64), np.asarray(colour_of(label), np.float64)
    direction = colour - bg
    share = ((image.astype(np.float64) - bg) @ direction) / (direction @ direction)
    return np.asarray(np.clip(share, 0.0, 1.0))


def box_in_pixels(image: np.ndarray, box: np.ndarray, label: int) -> np.ndarray:
    """The object's extent (xyxy) read from the pixels around `box`: through its middle band, each
    axis's coverage profile gives the width (its sum) and the centre (its centroid)."""
    height, width = image.shape[:2]
    x0, y0, x1, y1 = box
    share = coverage(image, label)
    out = []
    for axis, (lo, hi), (a, b), size in ((1, (x0, x1), (y0, y1), width), (0, (y0, y1), (x0, x1), height)):
        band = slice(int(a + (b - a) / 4), max(int(a + (b - a) / 4) + 1, int(np.ceil(b - (b - a) / 4))))
        window = slice(max(0, int(lo) - 3), min(size, int(np.ceil(hi)) + 3))
        profile = (share[band, window] if axis == 1 else share[window, band].T).mean(0)
        span = profile.sum()
        centre = (profile * (np.arange(window.start, window.stop) + 0.5)).sum() / span
        out.append((centre - span / 2, centre + span / 2))
    return np.array([out[0][0], out[1][0], out[0][1], out[1][1]])


@pytest.mark.parametrize("kind, damage", CASES, ids=[f"{k}-{d}" for k, d in CASES])
def test_each_source_is_recognised_and_each_bad_annotation_rejected_with_its_reason(kind: str, damage: str,
                                                                                   tmp_path: Path) -> None:
    source = build_targets(tmp_path / "src", damage, kind)
    out = tmp_path / "ds.iof"
    if source.refusal is not None:
        with pytest.raises(IofeedError, match=source.refusal) as raised:
            preprocess(str(source.spec), out, workers=1, progress=False, val_fraction=0)
        assert "\n" not in str(raised.value)
        return
    summary = preprocess(str(source.spec), out, workers=1, progress=False, val_fraction=0)
    manifest = json.loads((out / "iofeed.json").read_text())
    assert manifest["source"]["kind"] == kind
    rejected = [json.loads(line) for line in (out / "rejected.jsonl").read_text().splitlines()]
    reasons = [r["reason"] for r in rejected]
    assert sorted(r.split(" (")[0] for r in reasons) == sorted(source.reasons), rejected
    for name in source.rejected_samples:
        assert any(name.split("#")[-1] in r["path"] for r in rejected), (name, rejected)
    if source.says:
        assert any(__import__("re").search(source.says, note) for note in summary.notes), summary.notes
    names = [_source_name(source, n) for n in _names(out)]
    assert sorted(names) == sorted(set({**source.boxes, **source.maps}) - source.rejected_samples)
    _check_stored(source, out, names)
    _check_delivered(source, out, names)


def _check_stored(source: TargetSource, out: Path, names: list[str]) -> None:
    """Every good object stored exactly (the images are below the 800 px side: no resize)."""
    table = np.load(out / "train-boxes.npz")
    for row, name in enumerate(names):
        lo, hi = table["offsets"][row], table["offsets"][row + 1]
        expected = source.boxes.get(name, [])
        assert np.allclose(table["boxes"][lo:hi], np.array([b for b, _ in expected]).reshape(-1, 4), atol=1e-3)
        assert table["labels"][lo:hi].tolist() == [label for _, label in expected]


def _check_delivered(source: TargetSource, out: Path, names: list[str]) -> None:
    if source.kind == "segmentation":
        _check_semantic(source, out, names)
        return
    loader = iofeed.loader(out, batch_size=4, framework="numpy", image_size=SIDE, augment="uint8", workers=1,
                           seed=3, output=iofeed.Output(target="boxes"), drop_last=False)
    checked, errors, seen = 0, [], []
    try:
        for images, targets in loader:
            seen += loader.last_indices.tolist()
            for i in range(len(images)):
                for k in range(int(targets["counts"][i])):
                    box, label = targets["boxes"][i, k], int(targets["labels"][i, k])
                    if min(box[2] - box[0], box[3] - box[1]) < 4:
                        continue  # all edge: blended with the surround in every row
                    errors.append(np.abs(box_in_pixels(images[i], box, label) - box).max())
                    checked += 1
        stats = loader.stats.boxes
    finally:
        loader.close()
    assert sorted(seen) == list(range(len(names)))
    stored = sum(len(source.boxes[n]) for n in names)
    assert stats["delivered"] + stats["dropped_not_visible"] == stored
    assert checked > 0 and max(errors) <= 0.5, f"boxes off their objects by up to {max(errors):.2f} px"


def _check_semantic(source: TargetSource, out: Path, names: list[str]) -> None:
    """Evaluation (letterbox): each mask is its label map resized nearest-neighbour, class ids as
    written, the padding 255. Training: each class's region carries its class's colour."""
    with pytest.raises(OptionError, match="semantic segmentation masks, not boxes: use Output\\(target='masks'\\)"):
        iofeed.loader(out, batch_size=4, framework="numpy", image_size=SIDE, output=iofeed.Output(target="boxes"))
    evaluation = iofeed.loader(out, batch_size=4, framework="numpy", image_size=SIDE, augment=False, workers=1,
                               output=iofeed.Output(target="masks"), drop_last=False)
    compared = 0
    try:
        for _, targets in evaluation:
            for i, row in enumerate(evaluation.last_indices):
                label_map = source.maps[names[int(row)]]
                height, width = label_map.shape
                scale = SIDE / max(width, height)
                shape = (max(1, round(height * scale)), max(1, round(width * scale)))
                expected = np.full((SIDE, SIDE), 255, np.uint8)
                expected[: shape[0], : shape[1]] = crop_resize_nearest(label_map, (0, 0, width, height), False, shape)
                assert np.array_equal(targets["masks"][i], expected), names[int(row)]
                compared += 1
    finally:
        evaluation.close()
    assert compared == len(names)
    training = iofeed.loader(out, batch_size=4, framework="numpy", image_size=SIDE, augment="uint8", workers=1,
                             seed=5, output=iofeed.Output(target="masks"))
    checked = 0
    try:
        for images, targets in training:
            assert set(np.unique(targets["masks"]).tolist()) <= {*SEMANTIC_CLASSES, 255}
            for i in range(len(images)):
                for label in set(np.unique(targets["masks"][i]).tolist()) - {0, 255}:
                    # a crop zoomed in blends an edge over a few pixels; nearest-neighbour keeps the mask's sharp
                    inner = _eroded(targets["masks"][i] == label, 3)
                    if inner.sum() >= 4:
                        assert (coverage(images[i][inner], label) > 0.7).mean() > 0.95
                        checked += 1
    finally:
        training.close()
    assert checked > 0


def _eroded(mask: np.ndarray, by: int) -> np.ndarray:
    """`mask` less `by` pixels from every edge (a square neighbourhood all inside)."""
    padded = np.pad(mask, by)
    return np.asarray(np.lib.stride_tricks.sliding_window_view(padded, (2 * by + 1, 2 * by + 1)).all(axis=(-2, -1)))


def test_the_adversarial_registry_holds_every_target_source() -> None:
    assert set(DAMAGES) <= set(BUILDERS)


def test_box_format_is_refused_for_another_source(tmp_path: Path) -> None:
    source = build_targets(tmp_path / "src", "clean", "yolo")
    with pytest.raises(OptionError, match="--box-format is for WebDataset shards with boxes"):
        preprocess(str(source.spec), tmp_path / "ds.iof", workers=1, progress=False, box_format="xyxy")


def test_ambiguous_boxes_read_with_the_box_format_given(tmp_path: Path) -> None:
    source = build_targets(tmp_path / "src", "ambiguous", "wds-boxes")
    out = tmp_path / "ds.iof"
    preprocess(str(source.spec), out, workers=1, progress=False, val_fraction=0, box_format="xyxy")
    _check_stored(source, out, [_source_name(source, n) for n in _names(out)])


def test_yolo_polygon_rows_become_masks_on_their_objects(tmp_path: Path) -> None:
    """A YOLO segmentation row (`class x1 y1 x2 y2 ...`): the polygon is the object's mask, its
    extent the box."""
    source = build_targets(tmp_path / "src", "clean", "yolo")
    label = source.spec / "labels" / "train" / "0000.txt"
    (x0, y0, x1, y1), cls = source.boxes["images/train/0000.png"][0]
    width, height = 140, 96
    polygon = [x0, y0, x1, y0, x1, y1, x0, y1]
    scaled = " ".join(f"{v / (width if k % 2 == 0 else height):.6f}" for k, v in enumerate(polygon))
    label.write_text(label.read_text() + f"{cls} {scaled}\n")
    source.boxes["images/train/0000.png"] = source.boxes["images/train/0000.png"] + [([x0, y0, x1, y1], cls)]
    out = tmp_path / "ds.iof"
    preprocess(str(source.spec), out, workers=1, progress=False, val_fraction=0)
    names = [_source_name(source, n) for n in _names(out)]
    _check_stored(source, out, names)
    loader = iofeed.loader(out, batch_size=2, framework="numpy", image_size=SIDE, augment=False, workers=1,
                           output=iofeed.Output(target="masks"), drop_last=False)
    try:
        for _, targets in loader:
            for i, row in enumerate(loader.last_indices):
                if names[int(row)] == "images/train/0000.png":
                    last = int(targets["counts"][i])
                    ys, xs = np.nonzero(targets["masks"][i] == last)
                    box = targets["boxes"][i, last - 1]
                    assert np.allclose([xs.min(), ys.min(), xs.max() + 1, ys.max() + 1], box, atol=1.0)
    finally:
        loader.close()


def test_box_in_pixels_finds_an_edge_to_a_fraction_of_a_pixel() -> None:
    """The check above is sharp: a box 0.6 px off its object reads as off by about that much."""
    from helpers.adversarial_targets import draw

    image = draw(80, 60, [([10.0, 12.0, 40.0, 44.0], 1)])
    true = np.array([10.0, 12.0, 40.0, 44.0])
    assert np.abs(box_in_pixels(image, true, 1) - true).max() < 0.05
    moved = true + [0.6, 0, 0.6, 0]
    assert np.abs(box_in_pixels(image, moved, 1) - moved).max() > 0.5


@pytest.mark.parametrize("kind, damage", [("yolo", "missing_labels"), ("wds-boxes", "ambiguous"),
                                          ("segmentation", "mask_size")])
def test_the_cli_recognises_each_source_and_says_what_it_counted(kind: str, damage: str, tmp_path: Path,
                                                                capsys: pytest.CaptureFixture[str]) -> None:
    from iofeed.cli.main import main

    source = build_targets(tmp_path / "src", damage, kind)
    args = ["preprocess", str(source.spec), "-o", str(tmp_path / "ds.iof"), "--workers", "1", "--val-fraction", "0"]
    if source.refusal:
        assert main(args) == 1
        assert "--box-format" in capsys.readouterr().err.strip().splitlines()[-1]
        args += ["--box-format", "xyxy"]
    assert main(args) in (0, None)
    printed = capsys.readouterr().out
    assert json.loads((tmp_path / "ds.iof" / "iofeed.json").read_text())["source"]["kind"] == kind
    if source.says:
        assert "source        1 images without a label file, kept as background" in printed
    if source.reasons:
        assert "mask of another size" in printed


@pytest.mark.torch
def test_torch_gives_one_semantic_mask_per_image_as_the_numpy_batch(tmp_path: Path) -> None:
    pytest.importorskip("torchvision")
    from torchvision import tv_tensors

    source = build_targets(tmp_path / "src", "clean", "segmentation")
    out = tmp_path / "ds.iof"
    preprocess(str(source.spec), out, workers=1, progress=False, val_fraction=0)
    batches = {}
    for framework in ("numpy", "torch"):
        loader = iofeed.loader(out, batch_size=4, framework=framework, image_size=SIDE, augment="uint8", workers=1,
                               seed=2, output=iofeed.Output(target="masks"))
        try:
            batches[framework] = next(iter(loader))[1]
        finally:
            loader.close()
    assert len(batches["torch"]) == 4
    for i, target in enumerate(batches["torch"]):
        assert set(target) == {"masks"} and isinstance(target["masks"], tv_tensors.Mask)
        assert np.array_equal(target["masks"].numpy(), batches["numpy"]["masks"][i])


def test_yolo_reads_roboflow_split_folders_as_ultralytics_does(tmp_path: Path) -> None:
    """`train/images/x.png` + `train/labels/x.txt` (Roboflow's export), the same boxes as
    `images/train` + `labels/train`."""
    source = build_targets(tmp_path / "src", "clean", "yolo")
    (source.spec / "train").mkdir()
    (source.spec / "images" / "train").rename(source.spec / "train" / "images")
    (source.spec / "labels" / "train").rename(source.spec / "train" / "labels")
    (source.spec / "images").rmdir()
    (source.spec / "labels").rmdir()
    source.boxes = {f"train/images/{n.split('/')[-1]}": v for n, v in source.boxes.items()}
    out = tmp_path / "ds.iof"
    preprocess(str(source.spec), out, workers=1, progress=False, val_fraction=0)
    assert json.loads((out / "iofeed.json").read_text())["source"]["kind"] == "yolo"
    names = [_source_name(source, n) for n in _names(out)]
    assert sorted(names) == sorted(source.boxes)
    _check_stored(source, out, names)


@pytest.mark.parametrize("text", ["names: [ant, 'bee', \"cat\"]\n",
                                  "nc: 3\nnames:\n  - ant\n  - bee\n  - cat\nval: x\n",
                                  "names:\n  0: ant\n  1: bee  # a comment\n  2: cat\ntrain: images\n"])
def test_yolo_names_read_without_pyyaml_in_each_form_ultralytics_writes(text: str, tmp_path: Path,
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    import sys

    from iofeed.prepare.sources.yolo import class_names

    (tmp_path / "data.yaml").write_text(text)
    monkeypatch.setitem(sys.modules, "yaml", None)  # `import yaml` raises ImportError
    assert class_names(tmp_path) == ["ant", "bee", "cat"]
