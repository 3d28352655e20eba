"""Id maps stored as row runs (decision 0165): they cut to the same masks as the whole map does
(which tests/test_box_geometry.py holds equal to torchvision's), a damaged member is a one-line
SampleError, and a dataset made before (PNG label maps, no `mask_form`) loads the same masks."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

import iofeed
from iofeed.errors import SampleError
from iofeed.image.mask_rows import decode_rows, encode_rows
from iofeed.image.masks import crop_resize_nearest
from iofeed.prepare import box_pack
from iofeed.prepare.run import preprocess
from iofeed.prepare.synth_coco import synth_coco


def _objects(height: int, width: int, seed: int) -> np.ndarray:
    """An id map of overlapping rectangles and a diagonal, ids 1..7 by object."""
    rng = np.random.default_rng(seed)
    ids = np.zeros((height, width), np.uint8)
    for k in range(7):
        x, y = rng.integers(0, width), rng.integers(0, height)
        ids[y:y + rng.integers(1, height + 1), x:x + rng.integers(1, width + 1)] = k + 1
    ids[np.arange(min(height, width)), np.arange(min(height, width))] = 9
    return ids


@pytest.mark.parametrize("shape", [(1, 1), (7, 300), (480, 640), (3, 70_000)])
def test_row_runs_expand_to_the_map_they_store(shape: tuple[int, int]) -> None:
    ids = _objects(*shape, seed=sum(shape))
    if shape[1] > 65_535:
        ids[1] = 4  # a run longer than a uint16: stored in pieces
    assert np.array_equal(decode_rows(encode_rows(ids), shape[1], shape[0]).expand(), ids)


def test_a_crop_of_row_runs_is_the_crop_of_the_whole_map() -> None:
    rng = np.random.default_rng(2)
    for trial in range(60):
        height, width = int(rng.integers(20, 400)), int(rng.integers(20, 400))
        ids = _objects(height, width, trial)
        runs = decode_rows(encode_rows(ids), width, height)
        left, top = int(rng.integers(0, width - 1)), int(rng.integers(0, height - 1))
        box = (left, top, int(rng.integers(left + 1, width + 1)), int(rng.integers(top + 1, height + 1)))
        size, flip = (int(rng.integers(8, 200)), int(rng.integers(8, 200))), bool(trial % 2)
        assert np.array_equal(crop_resize_nearest(runs, box, flip, size), crop_resize_nearest(ids, box, flip, size))


def test_a_damaged_member_is_a_sample_error_naming_what_is_wrong() -> None:
    ids = _objects(20, 30, 1)
    data = bytearray(encode_rows(ids))
    with pytest.raises(SampleError, match="30x20, the image 31x20"):
        decode_rows(bytes(data), 31, 20)
    with pytest.raises(SampleError, match="bytes, its row runs need"):
        decode_rows(bytes(data[:-1]), 30, 20)
    with pytest.raises(SampleError, match="too short"):
        decode_rows(b"\0" * 5, 30, 20)
    runs = decode_rows(bytes(data), 30, 20)
    lengths = runs.lengths.copy()
    lengths[0] += 1  # row 0 one pixel too long, covered still by the total if a later one shrinks
    lengths[-1] -= 1
    damaged = type(runs)(runs.first, lengths, runs.values, runs.width)
    with pytest.raises(SampleError, match="do not cover its rows 0-19"):
        damaged.expand()
    assert np.array_equal(damaged.window(1, 19), ids[1:19])  # rows between the damage are still whole


def _masks(out: Path) -> list[np.ndarray]:
    loader = iofeed.loader(out, batch_size=4, framework="numpy", image_size=64, augment="uint8", workers=1,
                           seed=11, output=iofeed.Output(target="masks"))
    try:
        return [targets["masks"].copy() for _, targets in loader]
    finally:
        loader.close()


def test_a_dataset_made_before_row_runs_loads_the_same_masks(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    synth_coco(tmp_path / "src", images=8, seed=4)
    preprocess(tmp_path / "src", tmp_path / "rows.iof", workers=1, progress=False, val_fraction=0.0)
    monkeypatch.setattr(box_pack, "MASK_FORM", "png")
    preprocess(tmp_path / "src", tmp_path / "png.iof", workers=1, progress=False, val_fraction=0.0)
    old = json.loads((tmp_path / "png.iof" / "iofeed.json").read_text())["targets"]["boxes"]
    new = json.loads((tmp_path / "rows.iof" / "iofeed.json").read_text())["targets"]["boxes"]
    assert "mask_form" not in old and new["mask_form"] == "rows"  # the old manifest, as before 0165
    assert any(p.name.endswith(".mask.png") for p in _members(tmp_path / "png.iof"))
    assert any(p.name.endswith(".mask.rows") for p in _members(tmp_path / "rows.iof"))
    rows, png = _masks(tmp_path / "rows.iof"), _masks(tmp_path / "png.iof")
    assert len(rows) == len(png) == 2 and all(np.array_equal(a, b) for a, b in zip(rows, png))
    assert all(m.max() > 0 for m in rows)


def _members(dataset: Path) -> list[Path]:
    import tarfile

    names: list[Path] = []
    for shard in dataset.glob("*.tar"):
        with tarfile.open(shard) as tar:
            names += [Path(n) for n in tar.getnames()]
    return names
