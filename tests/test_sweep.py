"""The adversarial sweep of preprocess / index / loader surfaces (docs/sweeps.md): each test is one
attempt that found a sample lost, relabelled or a misleading error, with pixels encoding labels."""
from __future__ import annotations

import json
import os
from pathlib import Path

from helpers.images import label_from_pixels, make_colour_tree
from helpers.sources import read_dataset
from iofeed.format.manifest import Manifest
from iofeed.prepare.run import preprocess


def _stored(out: Path) -> dict[str, tuple[int, int]]:
    """{source name: (stored label, label its pixels encode)} of every sample of a dataset."""
    return {name: (classes[0], label_from_pixels(image)) for name, (image, classes, _) in read_dataset(out).items()}


def _rejected(out: Path) -> dict[str, str]:
    lines = (out / "rejected.jsonl").read_text().splitlines()
    return {row["path"]: row["reason"] for row in map(json.loads, lines)}


def test_a_symlinked_class_folder_at_the_top_is_a_class_not_dropped(tmp_path):
    """ImageNet-style trees built from links: a class folder linked in from elsewhere was rejected
    whole ("symlinked folder"), so the dataset silently had a class fewer."""
    elsewhere = make_colour_tree(tmp_path / "elsewhere", per_class=3)
    src = tmp_path / "src"
    src.mkdir()
    for folder in sorted(elsewhere.iterdir())[:3]:
        os.rename(folder, src / folder.name)
    os.symlink(elsewhere / "004.colour3", src / "004.colour3")
    summary = preprocess(src, tmp_path / "out.iof", val_fraction=0, progress=False, workers=1)
    stored = _stored(summary.out)
    assert Manifest.read(summary.out).classes == ["colour0", "colour1", "colour2", "colour3"]
    assert len(stored) == 12 and all(label == coded for label, coded in stored.values())
    assert sum(name.startswith("004.colour3/") for name in stored) == 3


def test_a_symlinked_class_folder_that_would_repeat_images_is_named_not_followed(tmp_path):
    """A link back into the source (or at it) would give another class's images a second label, or
    loop; two links to one folder would store its images twice: each is rejected with the reason."""
    src = make_colour_tree(tmp_path / "src", per_class=2)
    outside = make_colour_tree(tmp_path / "outside", per_class=2)
    os.symlink(src / "002.colour1", src / "005.alias")
    os.symlink(src, src / "006.loop")
    os.symlink(outside / "003.colour2", src / "007.linked")
    os.symlink(outside / "003.colour2", src / "008.again")
    summary = preprocess(src, tmp_path / "out.iof", val_fraction=0, progress=False, workers=1)
    stored, rejected = _stored(summary.out), _rejected(summary.out)
    assert "inside the source" in rejected["005.alias"]
    assert "a folder holding it" in rejected["006.loop"]
    assert "the same folder as class 007.linked" in rejected["008.again"]
    names = Manifest.read(summary.out).classes
    assert names == ["colour0", "colour1", "colour2", "colour3", "linked"]
    assert len(stored) == 10
    assert all(names[label] == "linked" or label == coded for label, coded in stored.values())
