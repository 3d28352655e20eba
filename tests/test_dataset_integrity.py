"""Reading a dataset safely: change detection, path confinement, malformed files, verify, odd names."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

import iofeed
from helpers.images import jpeg_bytes, make_colour_tree, make_image_tree, smooth_rgb
from iofeed.cli.main import main
from iofeed.errors import DatasetError, WorkerError
from iofeed.format.manifest import Manifest
from iofeed.format.table import load_sources
from iofeed.prepare.run import ImagePolicy, preprocess
from iofeed.prepare.verify import verify_dataset
from iofeed.sources.sample_reader import SampleReader
from iofeed.sources.samples import open_source


def _edit_manifest(out: Path, edit) -> None:
    path = out / "iofeed.json"
    raw = json.loads(path.read_text())
    edit(raw)
    path.write_text(json.dumps(raw))


def _last_line(capsys) -> str:
    err = capsys.readouterr().err.strip()
    assert "Traceback" not in err
    return err.splitlines()[-1]


# ------------------------------------------------------------------ item 5: change detection


@pytest.mark.parametrize("fmt", ["jpeg", "raw"])
def test_a_reader_opened_before_an_overwrite_raises(tmp_path, fmt):
    """The new dataset's shards are never read with the old table."""
    out = tmp_path / "d.iof"
    policy = ImagePolicy(format=fmt)
    preprocess(make_colour_tree(tmp_path / "a", per_class=6), out, policy=policy, shard_bytes=1 << 16,
               progress=False, workers=1)
    source = open_source(out)
    reader = SampleReader(source)
    first = int(np.flatnonzero(source.file_id == 0)[0])
    (reader.pixels if fmt == "raw" else reader.read)(first)  # shard 0 opened before the swap
    make_image_tree(tmp_path / "b", classes=4, per_class=7)
    preprocess(tmp_path / "b", out, policy=policy,
               shard_bytes=1 << 16, progress=False, workers=1, overwrite=True)
    later = int(np.flatnonzero(source.file_id == source.file_id.max())[0])
    assert source.file_id.max() > 0
    with pytest.raises(DatasetError, match="was replaced after it was opened"):
        (reader.pixels if fmt == "raw" else reader.read)(later)
    reader.close()


def test_a_loader_opened_before_an_overwrite_raises(tmp_path):
    out = tmp_path / "d.iof"
    preprocess(make_colour_tree(tmp_path / "a", per_class=6), out, progress=False, workers=1)
    with iofeed.loader(out, batch_size=4, workers=1) as ld:
        make_image_tree(tmp_path / "b", classes=4, per_class=7)
        preprocess(tmp_path / "b", out, progress=False, workers=1, overwrite=True)
        with pytest.raises((DatasetError, WorkerError), match="was replaced after it was opened"):
            list(ld)


def test_datasets_without_an_id_still_read(colour_dataset, tmp_path):
    old = tmp_path / "old.iof"
    shutil.copytree(colour_dataset, old)
    _edit_manifest(old, lambda raw: (raw.pop("dataset_id"), raw.update(version=2)))
    source = open_source(old)
    assert source.dataset_id == "" and len(SampleReader(source).read(0)) > 0


# ------------------------------------------------------------------ item 9: paths stay inside


@pytest.mark.parametrize("field, value", [
    ("name", "/etc/passwd"), ("name", "../../etc/passwd"), ("index", "../x.idx"), ("name", "sub/x.tar"),
    ("table", "/etc/passwd"), ("name", ""),
])
def test_manifest_paths_cannot_leave_the_dataset(colour_dataset, tmp_path, field, value):
    crafted = tmp_path / "crafted.iof"
    shutil.copytree(colour_dataset, crafted)

    def edit(raw):
        if field == "table":
            raw["splits"]["train"]["table"] = value
        else:
            raw["splits"]["train"]["shards"][0][field] = value

    _edit_manifest(crafted, edit)
    with pytest.raises(DatasetError, match="leaves the dataset directory"):
        open_source(crafted)
    with pytest.raises(DatasetError, match="leaves the dataset directory"):
        Manifest.read(crafted)


# ------------------------------------------------------------------ item 10: malformed files


@pytest.mark.parametrize("text", ["[]", '{"format": "iofeed-dataset", "version": 3, "splits": []}',
                                  '{"format": "iofeed-dataset", "version": 3, "splits": {"train": 5}}', "{"])
def test_malformed_manifest_is_a_one_line_error(colour_dataset, tmp_path, capsys, text):
    bad = tmp_path / "bad.iof"
    shutil.copytree(colour_dataset, bad)
    (bad / "iofeed.json").write_text(text)
    assert main(["inspect", str(bad)]) == 1
    assert _last_line(capsys).startswith("iofeed: error:")
    with pytest.raises(DatasetError):
        open_source(bad)


@pytest.mark.parametrize("content", [b"", b"not numpy at all", None])
def test_malformed_table_is_a_one_line_error(colour_dataset, tmp_path, capsys, content):
    bad = tmp_path / "bad.iof"
    shutil.copytree(colour_dataset, bad)
    table = bad / "train-samples.npy"
    if content is None:
        np.save(table, np.arange(5))  # a valid .npy of the wrong layout
    else:
        table.write_bytes(content)
    with pytest.raises(DatasetError, match="train-samples.npy"):
        open_source(bad)
    assert main(["inspect", str(bad), "--verify"]) == 1
    assert "train-samples.npy" in _last_line(capsys)


def test_output_file_with_overwrite_is_a_one_line_error(image_tree, tmp_path, capsys):
    src, _ = image_tree
    (tmp_path / "a-file").write_text("keep")
    assert main(["preprocess", str(src), "-o", str(tmp_path / "a-file"), "--overwrite", "--workers", "1"]) == 1
    assert "not a directory" in _last_line(capsys) and (tmp_path / "a-file").read_text() == "keep"


# ------------------------------------------------------------------ item 12: surprises


def test_inspect_verify_passes_a_whole_dataset_and_names_damage(colour_dataset, tmp_path, capsys):
    assert main(["inspect", str(colour_dataset), "--verify"]) == 0
    assert "verified      40 samples" in capsys.readouterr().out
    damaged = tmp_path / "damaged.iof"
    shutil.copytree(colour_dataset, damaged)
    shard = damaged / Manifest.read(damaged).splits["train"].shards[0]["name"]
    shard.write_bytes(shard.read_bytes()[:-4096])
    table = np.load(damaged / "val-samples.npy")
    table["label"][0] = (table["label"][0] + 1) % 4
    np.save(damaged / "val-samples.npy", table)
    assert main(["inspect", str(damaged), "--verify"]) == 1
    captured = capsys.readouterr()
    assert "failed verification" in captured.err.strip().splitlines()[-1]
    problems = [line for line in captured.out.splitlines() if "problem" in line]
    assert any(shard.name in p and "bytes" in p for p in problems)
    assert any("label member" in p for p in problems)
    assert not verify_dataset(colour_dataset).problems


def test_a_dataset_inside_src_is_not_a_class(image_tree, tmp_path):
    src, expected = image_tree
    preprocess(src, tmp_path / "elsewhere.iof", progress=False, workers=1)
    shutil.move(tmp_path / "elsewhere.iof", src / "old.iof")  # written there by an older iofeed
    summary = preprocess(src, tmp_path / "o.iof", progress=False, workers=1)
    manifest = Manifest.read(tmp_path / "o.iof")
    assert "old.iof" not in manifest.class_dirs and len(manifest.classes) == 3
    assert sum(summary.written.values()) == len(expected)
    assert summary.rejected["an iofeed dataset, not a class folder"] == 1


def test_empty_class_folders_are_said_in_the_summary(image_tree, tmp_path, capsys):
    src, _ = image_tree
    (src / "000.nothing").mkdir()
    (src / "004.only-text").mkdir()
    (src / "004.only-text" / "readme.txt").write_text("no images")
    assert main(["preprocess", str(src), "-o", str(tmp_path / "o.iof"), "--workers", "1"]) == 0
    printed = capsys.readouterr().out
    assert "empty classes 2 class folders without an image" in printed and "000.nothing, 004.only-text" in printed
    manifest = Manifest.read(tmp_path / "o.iof")
    assert manifest.source["empty_classes"] == ["000.nothing", "004.only-text"]
    assert len(manifest.classes) == 5, "labels stay one per folder"


def test_any_file_name_round_trips_in_the_source_list(tmp_path):
    src = tmp_path / "src"
    names = ["plain.jpg", "new\nline.jpg", "back\\slash.jpg", 'quote".jpg', "tab\t.jpg", "ü.jpg"]
    for i, name in enumerate(names):
        (src / "001.a").mkdir(parents=True, exist_ok=True)
        (src / "001.a" / name).write_bytes(jpeg_bytes(smooth_rgb(60, 50, seed=i)))
    preprocess(src, tmp_path / "o.iof", progress=False, workers=1, val_per_class=0)
    sources = load_sources(tmp_path / "o.iof" / "train-samples.npy")
    assert sorted(sources) == sorted(f"001.a/{n}" for n in names)
    assert not verify_dataset(tmp_path / "o.iof").problems


def test_old_plain_source_lists_still_read(colour_dataset, tmp_path):
    old = tmp_path / "old.iof"
    shutil.copytree(colour_dataset, old)
    sources = load_sources(old / "train-samples.npy")
    (old / "train-samples.sources.jsonl").unlink()
    (old / "train-samples.sources.txt").write_text("".join(f"{s}\n" for s in sources))
    assert load_sources(old / "train-samples.npy") == sources
