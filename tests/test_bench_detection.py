"""`iofeed bench --task detection`: torchvision's CocoDetection + v2 recipe + DataLoader against
iofeed's box and mask targets, on the COCO stand-in, in one run with a ratio per pair. Both sides
deliver real targets: every object's mask lies on pixels of its category's colour, inside its box."""
from __future__ import annotations

import json

import numpy as np
import pytest

from helpers.images import interior
from iofeed.adapters.normalize import IMAGENET_MEAN, IMAGENET_STD
from iofeed.cli.bench.feeds import DETECTION_BASELINE, FEEDS, FeedSpec, baseline_of, default_feeds, open_feed
from iofeed.cli.bench.schema import validate
from iofeed.cli.main import main
from iofeed.prepare.run import preprocess
from iofeed.prepare.synth_coco import COLOURS, colour_of, synth_coco

SIZE, BATCH = 64, 4
PAIRS = {"torchvision-coco-boxes": "iofeed-coco-boxes", "torchvision-coco-masks": "iofeed-coco-masks"}


@pytest.fixture(scope="module")
def coco(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """A tiny stand-in (the folder) and its dataset, as the bench makes it (every image in train)."""
    root = tmp_path_factory.mktemp("bench-coco")
    synth_coco(root / "coco", images=12, seed=4)
    preprocess(root / "coco", root / "coco.iof", val_fraction=0.0, workers=1, progress=False)
    return {"folder": str(root / "coco"), "dataset": str(root / "coco.iof")}


def test_the_detection_task_runs_the_two_pairs_each_against_torchvision() -> None:
    assert default_feeds("detection") == tuple(name for pair in PAIRS.items() for name in pair)
    for baseline, contender in PAIRS.items():
        assert baseline_of(contender) == baseline_of(baseline) == baseline
        assert FEEDS.caps(contender).keywords["output"].target == baseline.rsplit("-", 1)[1]
    assert not set(default_feeds("detection")) & set(default_feeds("classification"))


def _pixels(image: object) -> np.ndarray:
    """A normalised float CHW image back to uint8-scale HWC."""
    array = np.asarray(image).transpose(1, 2, 0) * np.array(IMAGENET_STD) + np.array(IMAGENET_MEAN)
    return array * 255.0


@pytest.mark.torch
@pytest.mark.torchvision
@pytest.mark.slow
@pytest.mark.parametrize("name", ["torchvision-coco-masks", "iofeed-coco-masks"])
def test_each_side_delivers_masks_on_their_objects_inside_their_boxes(name: str, coco: dict[str, str]) -> None:
    """The baseline does the work it is credited with: boxes, labels and per-object masks that follow
    the crop and flip (the stand-in fills each object with its category's colour)."""
    feed = open_feed(FeedSpec(name, coco[FEEDS.caps(name).reads], 1, BATCH, SIZE, "cpu", seed=3))
    try:
        stream = feed.batches()
        batches = [next(stream) for _ in range(4)]
        stream.close()
    finally:
        feed.close()
    checked = 0
    for images, targets in batches:
        assert tuple(images.shape) == (BATCH, 3, SIZE, SIZE) and len(targets) == BATCH
        for image, target in zip(images, targets):
            boxes, labels, masks = target["boxes"], target["labels"], target["masks"]
            assert boxes.format.value == "XYXY" and tuple(boxes.canvas_size) == (SIZE, SIZE)
            assert len(boxes) == len(labels) == len(masks) and masks.shape[1:] == (SIZE, SIZE)
            pixels = _pixels(image)
            for box, label, mask in zip(boxes.tolist(), labels.tolist(), masks.numpy().astype(bool)):
                colour = colour_of(label) if name.startswith("torchvision") else COLOURS[label]
                ys, xs = np.nonzero(mask)
                if len(xs) == 0:
                    continue  # an object cropped to a sliver: its box is kept by a rule, its mask empty
                assert xs.min() >= box[0] - 2 and xs.max() + 1 <= box[2] + 2
                assert ys.min() >= box[1] - 2 and ys.max() + 1 <= box[3] + 2
                inner = interior(mask)
                if inner.sum() >= 4:
                    assert (np.abs(pixels[inner] - colour).max(-1) <= 64).mean() > 0.9, (name, label)
                    checked += 1
    assert checked > 3, "objects were checked"


@pytest.mark.torch
@pytest.mark.torchvision
@pytest.mark.slow
def test_the_detection_bench_prints_both_contenders_and_their_ratio(tmp_path, capsys) -> None:
    """End to end on a tiny stand-in folder: the bench preprocesses it, runs both pairs in one run and
    prints each iofeed feed's ratio against torchvision's feed of the same targets."""
    synth_coco(tmp_path / "coco", images=12, seed=2)
    out = tmp_path / "res" / "bench.json"
    code = main(["bench", str(tmp_path / "coco"), "--task", "detection", "--seconds", "0.5", "--rounds", "1",
                 "--warmup", "0", "--batch-size", str(BATCH), "--image-size", str(SIZE), "--workers", "1",
                 "--json", str(out)])
    printed = capsys.readouterr()
    assert code == 0, printed.err
    record = json.loads(out.read_text())
    assert validate(record) == [] and out.with_suffix(".png").read_bytes()[:4] == b"\x89PNG"
    assert record["settings"]["task"] == "detection" and record["baseline"] == DETECTION_BASELINE
    assert "--task detection" in record["command"] and (tmp_path / "coco.iof" / "iofeed.json").is_file()
    feeds = {f["name"]: f for f in record["feeds"]}
    assert list(feeds) == list(default_feeds("detection"))
    for baseline, contender in PAIRS.items():
        assert feeds[baseline]["status"] == feeds[contender]["status"] == "ok"
        assert feeds[contender]["baseline"] == baseline and feeds[contender]["images"] > 0
        ratio = feeds[contender]["images_per_sec"] / feeds[baseline]["images_per_sec"]
        assert feeds[contender]["vs_baseline"] == pytest.approx(ratio)
        row = next(line for line in printed.out.splitlines() if line.startswith(contender + " "))
        assert f"{ratio:.2f}" in row.split()
        assert any(line.startswith(baseline + " ") for line in printed.out.splitlines())
    assert "CocoDetection opens each JPEG file" in printed.out  # what each side does, said with the numbers


@pytest.mark.parametrize(("args", "said"), [
    (["--task", "detection", "--model", "resnet50"], "--task detection measures the loaders alone"),
    (["--feeds", "iofeed-coco-boxes"], "is a detection feed and this is a classification run"),
    (["--task", "detection"], "no COCO instances JSON"),
])
def test_detection_options_fail_with_one_line(args: list[str], said: str, colour_tree, capsys) -> None:
    assert main(["bench", str(colour_tree), *args]) == 1
    err = capsys.readouterr().err
    assert err.startswith("iofeed: error:") and said in err and err.count("\n") == 1
