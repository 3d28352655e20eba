"""Tests for the Caltech-256-shaped stand-in (small sets only: per_class=1 or 2)."""
from __future__ import annotations

import hashlib
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from iofeed.errors import OptionError
from iofeed.prepare.caltech_names import CALTECH256_CLASSES
from iofeed.prepare.synth import ROOT_NAME, class_counts, plan_images, synth_caltech256


def _hashes(root: Path) -> dict[str, str]:
    return {
        str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(root.rglob("*"))
        if p.is_file()
    }


@pytest.fixture(scope="module")
def small(tmp_path_factory: pytest.TempPathFactory):
    """A per_class=2 set made with two worker processes."""
    return synth_caltech256(tmp_path_factory.mktemp("c256"), per_class=2, seed=7, workers=2, progress=False)


def test_class_counts_full_match_the_real_set() -> None:
    counts = class_counts()
    assert len(counts) == 257
    assert sum(counts) == 30_607
    assert min(counts) >= 80 and max(counts) == 827
    assert counts[256] == 827 and counts[231] == 358 and counts[144] == 798
    assert counts[250] == 800 and counts[252] == 435


def test_class_counts_per_class() -> None:
    assert class_counts(3) == [3] * 257


def test_full_plan_matches_real_set_statistics() -> None:
    specs = plan_images(class_counts(), seed=0)
    width = np.array([s.width for s in specs])
    height = np.array([s.height for s in specs])
    kinds = Counter(s.kind for s in specs)
    assert len(specs) == 30_607 and len({s.path for s in specs}) == 30_607
    assert kinds["gray"] / len(specs) == pytest.approx(0.014, rel=0.2)
    assert kinds["cmyk"] and kinds["progressive"] and kinds["png"] == 1
    assert width.mean() == pytest.approx(372, rel=0.2) and height.mean() == pytest.approx(324, rel=0.2)
    assert np.median(width) == pytest.approx(300, rel=0.2)
    assert np.median(height) == pytest.approx(279, rel=0.2)
    assert np.mean(np.maximum(width, height) >= 1000) == pytest.approx(0.02, rel=0.3)
    assert int(np.sum((width == 7900) & (height == 7900))) == 1
    assert sum("056.dog/greg/" in s.path for s in specs) == 5


def test_small_plan_caps_sizes() -> None:
    specs = plan_images(class_counts(2), seed=0, max_side=1200)
    assert max(max(s.width, s.height) for s in specs) == 1200


def test_layout(small) -> None:
    root = small.root
    assert root.name == ROOT_NAME
    folders = sorted(p.name for p in root.iterdir())
    assert folders == list(CALTECH256_CLASSES)
    assert folders[0] == "001.ak47" and folders[-1] == "257.clutter"
    assert sorted(p.name for p in (root / "001.ak47").iterdir()) == ["001_0001.jpg", "001_0002.jpg"]
    assert list((root / "056.dog" / "greg").glob("*.jpg"))
    assert (root / "198.spider" / "RENAME2").is_file()
    assert small.images == 2 * 257 and small.classes == 257


def test_every_image_opens_and_summary_matches_disk(small) -> None:
    files = [p for p in small.root.rglob("*") if p.is_file() and p.name != "RENAME2"]
    modes, formats = Counter(), Counter()
    for path in files:
        with Image.open(path) as img:
            img.load()
            modes[img.mode] += 1
            formats[img.format] += 1
    assert len(files) == small.images
    assert sum(p.stat().st_size for p in files) == small.bytes
    assert modes["L"] >= 1 and modes["CMYK"] >= 1 and modes["RGBA"] == 1
    assert formats["PNG"] == 1 and formats["JPEG"] == len(files) - 1


def test_same_seed_same_bytes_whatever_the_workers(small, tmp_path: Path) -> None:
    again = synth_caltech256(tmp_path, per_class=2, seed=7, workers=1, progress=False)
    assert _hashes(again.root) == _hashes(small.root)


def test_different_seed_different_bytes(small, tmp_path: Path) -> None:
    other = synth_caltech256(tmp_path, per_class=2, seed=8, workers=1, progress=False)
    before, after = _hashes(small.root), _hashes(other.root)
    assert before.keys() == after.keys()
    assert sum(before[k] != after[k] for k in before) > 0.9 * len(before)


def test_existing_output_needs_overwrite(tmp_path: Path) -> None:
    stale = tmp_path / ROOT_NAME / "stale.txt"
    stale.parent.mkdir()
    stale.write_text("old")
    with pytest.raises(OptionError, match="overwrite=True"):
        synth_caltech256(tmp_path, per_class=1, workers=1, progress=False)
    summary = synth_caltech256(tmp_path, per_class=1, workers=1, progress=False, overwrite=True)
    assert not stale.exists() and summary.images == 257


@pytest.mark.parametrize("bad", [{"per_class": 0}, {"workers": 0}])
def test_bad_arguments(tmp_path: Path, bad: dict) -> None:
    with pytest.raises(OptionError):
        synth_caltech256(tmp_path, progress=False, **bad)


@pytest.mark.parametrize("overwrite", [False, True])
def test_a_folder_with_other_content_is_refused(tmp_path: Path, capsys, overwrite: bool) -> None:
    """Issue 22.6: a user's class folders next to the stand-in would vanish from the next preprocess."""
    from iofeed.cli.main import main

    mine = tmp_path / "001.cats" / "a.jpg"
    mine.parent.mkdir()
    mine.write_bytes(b"mine")
    argv = ["synth", "caltech256", str(tmp_path), "--per-class", "1", "--workers", "1"]
    assert main(argv + (["--overwrite"] if overwrite else [])) == 1
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "is not empty (it holds '001.cats')" in err
    assert mine.read_bytes() == b"mine" and not (tmp_path / ROOT_NAME).exists()
    (tmp_path / "a-file").write_text("x")
    with pytest.raises(OptionError, match="is not a folder"):
        synth_caltech256(tmp_path / "a-file", per_class=1, workers=1, progress=False)
