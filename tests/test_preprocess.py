"""preprocess: every valid image lands once with its label, quirks are handled, output is reproducible."""
from __future__ import annotations

import hashlib
import io
import json
from pathlib import Path

import numpy as np
import pytest
from PIL import Image, ImageOps

from helpers.images import make_image_tree
from iofeed.cli.main import main
from iofeed.errors import IofeedError, OptionError, SourceError
from iofeed.format.manifest import Manifest
from iofeed.format.shards import read_index, read_member
from iofeed.format.table import load_sources, load_table
from iofeed.prepare.run import ImagePolicy, default_output, preprocess


def _samples(out: Path) -> dict[str, tuple[str, int, bytes, tuple[int, int]]]:
    """{source rel path: (split, label, jpeg bytes, (w, h))} read back through the tables."""
    manifest = Manifest.read(out)
    found = {}
    for split, info in manifest.splits.items():
        table = load_table(out / info.table)
        sources = load_sources(out / info.table)
        for row, source in zip(table, sources):
            shard = out / info.shards[row["shard"]]["name"]
            data = read_member(shard, int(row["offset"]), int(row["size"]))
            assert source not in found, f"{source} written twice"
            found[source] = (split, int(row["label"]), data, (int(row["width"]), int(row["height"])))
    return found


def test_every_valid_image_lands_once_with_its_label(quirky_tree, tmp_path):
    src, valid, rejected = quirky_tree
    out = tmp_path / "out.iof"
    summary = preprocess(src, out, progress=False, workers=2, val_per_class=1)
    found = _samples(out)
    assert set(found) == set(valid)
    for rel, (_, label, data, _) in found.items():
        assert label == valid[rel], rel
        assert Image.open(io.BytesIO(data)).mode == "RGB"
    assert summary.found == len(valid) + len(rejected)
    assert sum(summary.written.values()) == len(valid)
    assert sum(summary.rejected.values()) == len(rejected)


def test_rejections_are_listed_with_reasons(quirky_tree, tmp_path):
    src, valid, rejected = quirky_tree
    out = tmp_path / "out.iof"
    preprocess(src, out, progress=False, workers=1)
    lines = [json.loads(line) for line in (out / "rejected.jsonl").read_text().splitlines()]
    listed = {entry["path"]: entry["reason"] for entry in lines}
    assert set(listed) == set(rejected)
    for rel, reason in rejected.items():
        assert listed[rel].startswith(reason), (rel, listed[rel])


def test_conversions_to_rgb(quirky_tree, tmp_path):
    src, _, _ = quirky_tree
    out = tmp_path / "out.iof"
    preprocess(src, out, progress=False, workers=1)
    found = _samples(out)
    gray = np.asarray(Image.open(io.BytesIO(found["001.class0/gray.jpg"][2])))
    assert gray.shape[2] == 3 and np.abs(gray[..., 0].astype(int) - gray[..., 2]).max() <= 3
    alpha = np.asarray(Image.open(io.BytesIO(found["002.class1/alpha.png"][2])))
    assert alpha.shape[2] == 3
    deep = np.asarray(Image.open(io.BytesIO(found["002.class1/deep.png"][2])).convert("L"))
    assert deep.max() >= 250 and deep.min() <= 5, "16-bit range maps onto 0..255"
    # EXIF orientation 6 on a 300x200 image: stored upright as 200 wide, 300 high
    assert found["002.class1/rotated.jpg"][3] == (200, 300)
    assert not Image.open(io.BytesIO(found["002.class1/progressive.jpg"][2])).info.get("progressive")


def test_resize_matches_direct_resize(quirky_tree, tmp_path):
    src, _, _ = quirky_tree
    out = tmp_path / "out.iof"
    preprocess(src, out, policy=ImagePolicy(shorter_side=128, quality=95), progress=False, workers=1)
    found = _samples(out)
    root = src / "256_ObjectCategories"
    for rel in ["003.class2/big.jpg", "002.class1/rotated.jpg", "001.class0/cmyk.jpg"]:
        _, _, data, (w, h) = found[rel]
        assert min(w, h) == 128
        direct = ImageOps.exif_transpose(Image.open(root / rel)).convert("RGB")
        direct = np.asarray(direct.resize((w, h), Image.Resampling.BICUBIC), dtype=np.float64)
        ours = np.asarray(Image.open(io.BytesIO(data)), dtype=np.float64)
        assert np.abs(ours - direct).mean() < 4.0, rel


def test_small_images_are_never_upscaled(image_tree, tmp_path):
    src, expected = image_tree
    out = tmp_path / "out.iof"
    preprocess(src, out, policy=ImagePolicy(shorter_side=1000), progress=False, workers=1)
    samples = _samples(out)
    assert set(samples) == set(expected)
    for rel, (_, _, data, size) in samples.items():
        assert Image.open(src / rel).size == size
        assert data == (src / rel).read_bytes(), "baseline RGB JPEGs below the size are kept as they are"


def test_index_reads_any_sample_by_offset(image_tree, tmp_path):
    src, _ = image_tree
    out = tmp_path / "out.iof"
    preprocess(src, out, progress=False, workers=1, shard_bytes=1 << 16)
    manifest = Manifest.read(out)
    assert len(manifest.splits["train"].shards) > 1, "small shards force several"
    for info in manifest.splits.values():
        table = load_table(out / info.table)
        by_shard = {i: {s.members["jpg"] for s in read_index(out / sh["index"])} for i, sh in enumerate(info.shards)}
        for row in table:
            assert (int(row["offset"]), int(row["size"])) in by_shard[int(row["shard"])]
            data = read_member(out / info.shards[row["shard"]]["name"], int(row["offset"]), int(row["size"]))
            assert Image.open(io.BytesIO(data)).size == (row["width"], row["height"])


def _tree_digest(path: Path) -> dict[str, str]:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(path.iterdir())}


def test_same_seed_gives_identical_shards(image_tree, tmp_path):
    src, _ = image_tree
    one = _tree_digest(preprocess(src, tmp_path / "a.iof", seed=3, progress=False, workers=2).out)
    two = _tree_digest(preprocess(src, tmp_path / "b.iof", seed=3, progress=False, workers=1).out)
    other = _tree_digest(preprocess(src, tmp_path / "c.iof", seed=4, progress=False, workers=1).out)
    shards = [name for name in one if name.endswith((".tar", ".idx"))]
    assert shards and all(one[n] == two[n] for n in shards)
    assert any(one[n] != other.get(n) for n in shards)


def test_split_sizes(image_tree, tmp_path):
    src, expected = image_tree
    summary = preprocess(src, tmp_path / "o.iof", val_per_class=2, progress=False, workers=1)
    assert summary.written == {"train": len(expected) - 6, "val": 6}


def test_default_output_is_a_sibling(image_tree):
    src, _ = image_tree
    summary = preprocess(src, progress=False, workers=1)
    assert summary.out == default_output(src) == src.parent / "tree.iof"
    assert (summary.out / "iofeed.json").is_file()


def test_existing_output_needs_overwrite(image_tree, tmp_path):
    src, _ = image_tree
    out = tmp_path / "o.iof"
    preprocess(src, out, progress=False, workers=1)
    with pytest.raises(OptionError, match="--overwrite"):
        preprocess(src, out, progress=False, workers=1)
    preprocess(src, out, progress=False, workers=1, overwrite=True)
    assert not list(tmp_path.glob(".o.iof.partial-*"))


def test_strict_fails_on_rejections(quirky_tree, tmp_path):
    src, _, _ = quirky_tree
    with pytest.raises(IofeedError, match="--strict"):
        preprocess(src, tmp_path / "o.iof", strict=True, progress=False, workers=1)
    assert not (tmp_path / "o.iof").exists()
    assert not list(tmp_path.glob(".o.iof.partial-*"))


def test_missing_and_empty_sources(tmp_path):
    with pytest.raises(SourceError, match="not found"):
        preprocess(tmp_path / "nope", tmp_path / "o.iof", progress=False)
    (tmp_path / "empty" / "001.a").mkdir(parents=True)
    (tmp_path / "empty" / "001.a" / "notes.txt").write_text("hello")
    with pytest.raises(SourceError, match="no images"):
        preprocess(tmp_path / "empty", tmp_path / "o.iof", progress=False)
    (tmp_path / "empty" / "001.a" / "zero.jpg").write_bytes(b"")
    with pytest.raises(SourceError, match=r"2 files rejected: (empty file 1, not an image|not an image .*, empty)"):
        preprocess(tmp_path / "empty", tmp_path / "o.iof", progress=False)


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--size", "0"], "--size"),
        (["--quality", "101"], "--quality"),
        (["--val-fraction", "1.5"], "--val-fraction"),
    ],
)
def test_cli_bad_options_exit_nonzero_with_one_line(image_tree, tmp_path, capsys, argv, message):
    src, _ = image_tree
    status = main(["preprocess", str(src), "-o", str(tmp_path / "o.iof"), *argv])
    err = capsys.readouterr().err.strip()
    assert status != 0 and message in err and len(err.splitlines()) == 1


def test_cli_preprocess_then_inspect(image_tree, capsys):
    src, expected = image_tree
    assert main(["preprocess", str(src), "--workers", "1"]) == 0
    printed = capsys.readouterr().out
    assert "tree.iof" in printed and f"images found  {len(expected)}" in printed
    assert main(["inspect", str(src.parent / "tree.iof")]) == 0
    assert "train" in capsys.readouterr().out


def test_bad_engine_and_address_are_one_line_errors(image_tree, tmp_path, capsys):
    src, _ = image_tree
    with pytest.raises(OptionError, match="engine='spark' is not one of local, ray"):
        preprocess(src, tmp_path / "o.iof", engine="spark", progress=False)
    status = main(["preprocess", str(src), "-o", str(tmp_path / "o.iof"), "--address", "auto"])
    err = capsys.readouterr().err.strip()
    assert status != 0 and "--engine ray" in err and len(err.splitlines()) == 1
    assert not (tmp_path / "o.iof").exists()


def test_every_file_rejected_exits_non_zero_with_the_counts(tmp_path, capsys):
    """Issue 22.7: "written train 0, val 0" with status 0 is a dataset of nothing."""
    src = tmp_path / "src"
    make_image_tree(src, classes=2, per_class=3)
    for i, path in enumerate(sorted(src.rglob("*.jpg"))):
        path.write_bytes(b"" if i == 0 else path.read_bytes()[:200])
    assert main(["preprocess", str(src), "-o", str(tmp_path / "o.iof"), "--workers", "1"]) == 1
    err = capsys.readouterr().err.strip().splitlines()[-1]  # after the progress bar
    assert err.startswith("iofeed: error: every file in") and "nothing written" in err
    assert "corrupt or truncated image 5" in err and "empty file 1" in err
    assert not (tmp_path / "o.iof").exists() and not list(tmp_path.glob(".o.iof.*"))
