"""JPEGs with corrupt entropy data (libjpeg warnings): every engine and preprocess refuse the same files."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

import iofeed
from helpers.images import make_colour_tree
from iofeed.prepare.run import preprocess

pytest.importorskip("simplejpeg")  # the workers engine's strict path; without it every engine uses Pillow


def _tree_with_corrupt_data(root: Path) -> Path:
    """Colour tree plus one JPEG whose scan was cut and closed with an end marker: Pillow and DALI
    decode it (grey blocks), the workers engine's libjpeg-turbo path refuses it."""
    make_colour_tree(root, per_class=2)
    good = (root / "001.colour0" / "0000.jpg").read_bytes()
    (root / "001.colour0" / "zz_cut.jpg").write_bytes(good[: len(good) * 2 // 3] + b"\xff\xd9")
    return root


def _delivered(root: Path, engine: str) -> tuple[int, dict]:
    with iofeed.loader(root, batch_size=3, engine=engine, workers=1, drop_last=False,
                       skips=iofeed.Skips(max_skipped=0.2)) as ld:
        count = sum(len(labels) for _, labels in ld)
        return count, dict(ld.stats.skipped)


@pytest.mark.dali
def test_dali_refuses_what_the_workers_engine_refuses(tmp_path):
    pytest.importorskip("nvidia.dali")
    root = _tree_with_corrupt_data(tmp_path / "t")
    workers = _delivered(root, "workers")
    assert workers == (9, {"corrupt or truncated image": 1}), "9 files, 1 skipped, a spare in its place"
    assert _delivered(root, "dali") == workers


def test_preprocess_does_not_keep_corrupt_data_as_it_came(tmp_path):
    root = _tree_with_corrupt_data(tmp_path / "t")
    summary = preprocess(root, tmp_path / "o.iof", progress=False, workers=1)
    assert sum(summary.written.values()) == 8
    rejected = [json.loads(line) for line in (tmp_path / "o.iof" / "rejected.jsonl").read_text().splitlines()]
    assert [r["path"] for r in rejected] == ["001.colour0/zz_cut.jpg"]
    assert rejected[0]["reason"].startswith("corrupt or truncated image (Corrupt JPEG data")
