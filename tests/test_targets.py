"""Targets beyond one class index: multi-hot labels and per-sample extras, stored under their own
WebDataset keys (read back by webdataset and DALI), described in iofeed.json (format version 4)."""
from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest

import iofeed
from helpers.sources import encode, picture
from iofeed.errors import DatasetError, OptionError
from iofeed.format.manifest import FORMAT_VERSION, MANIFEST_NAME, Manifest
from iofeed.format.table import load_sources
from iofeed.prepare.run import preprocess

WANT = {"a/0.png": ["cat"], "a/1.png": ["cat", "dog"], "a/2.png": ["bird", "dog"], "a/3.png": ["bird"],
        "a/4.png": ["dog"], "a/5.png": ["cat"], "a/6.png": ["bird", "cat", "dog"], "a/7.png": ["dog"]}


@pytest.fixture(scope="module")
def multi(tmp_path_factory) -> Path:
    """A multi-label dataset from a labels CSV whose `note` column is each sample's extra."""
    root = tmp_path_factory.mktemp("multi")
    (root / "src" / "a").mkdir(parents=True)
    rows = ["path,label,note"]
    for i, (rel, classes) in enumerate(WANT.items()):
        (root / "src" / rel).write_bytes(encode(picture(i), "png"))
        rows.append(f'{rel},"{json.dumps(classes).replace(chr(34), chr(34) * 2)}",n{i}')
    (root / "labels.csv").write_text("\n".join(rows) + "\n")
    return preprocess(root / "src", root / "multi.iof", labels=root / "labels.csv", val_fraction=0, progress=False,
                      workers=1).out


def _want_vector(ds: Path, index: int) -> tuple[np.ndarray, dict]:
    manifest = Manifest.read(ds)
    rel = load_sources(ds / manifest.splits["train"].table)[index]
    vector = np.zeros(len(manifest.classes), np.float32)
    vector[[manifest.classes.index(c) for c in WANT[rel]]] = 1
    return vector, {"note": f"n{list(WANT).index(rel)}"}


def test_multi_hot_labels_and_extras_come_with_each_batch(multi):
    with iofeed.loader(str(multi), batch_size=3, image_size=24, workers=1,
                       output=iofeed.Output(target="multi_hot", extras=True),
                       drop_last=False) as ld:
        seen = 0
        for images, labels, extras in ld:
            assert labels.dtype == np.float32 and labels.shape == (len(images), 3) and len(extras) == len(images)
            for row, index in enumerate(ld.last_indices):
                vector, extra = _want_vector(multi, int(index))
                assert np.array_equal(labels[row], vector) and extras[row] == extra
                seen += 1
    assert seen == len(WANT)


def test_class_dataset_gives_one_hot_rows_and_no_extras(colour_dataset):
    with iofeed.loader(str(colour_dataset), batch_size=4, image_size=24, workers=1,
                       output=iofeed.Output(target="multi_hot", extras=True)) as ld:
        images, labels, extras = next(iter(ld))
        plain = iofeed.loader(str(colour_dataset), batch_size=4, image_size=24, workers=1)
        _, indices = next(iter(plain))
        plain.close()
    assert labels.shape == (4, 4) and np.array_equal(labels.argmax(1), indices) and labels.sum() == 4
    assert extras == [None] * 4


@pytest.mark.torch
def test_torch_gets_float_multi_hot_tensors(multi):
    import torch

    with iofeed.loader(str(multi), batch_size=4, image_size=24, workers=1, framework="torch",
                       output=iofeed.Output(target="multi_hot")) as ld:
        images, labels = next(iter(ld))
        assert labels.dtype == torch.float32 and labels.shape == (4, 3)
        for row, index in enumerate(ld.last_indices):
            assert np.array_equal(labels[row].numpy(), _want_vector(multi, int(index))[0])


def test_bad_target_options_are_one_line_errors(multi):
    with pytest.raises(OptionError, match="target='soft'"):
        iofeed.loader(str(multi), batch_size=2, output=iofeed.Output(target="soft"))
    with pytest.raises(OptionError, match="tf.data"):
        iofeed.loader(str(multi), batch_size=2, framework="tf", output=iofeed.Output(extras=True))


def test_members_have_their_own_keys_readable_by_webdataset(multi):
    import webdataset as wds

    manifest = Manifest.read(multi)
    assert manifest.version == FORMAT_VERSION == 4
    assert manifest.targets == {"kind": "multi_label", "extras": True, "files": {"train": "train-targets.jsonl"}}
    tars = [str(multi / s["name"]) for s in manifest.splits["train"].shards]
    samples = list(wds.WebDataset(tars, shardshuffle=False, empty_check=False).decode())
    assert len(samples) == len(WANT)
    notes = {s["json"]["note"]: [manifest.classes[c] for c in s["classes.json"]] for s in samples}
    assert notes == {f"n{i}": classes for i, classes in enumerate(WANT.values())}
    assert all("cls" not in s for s in samples), "no single class where there are several"


@pytest.mark.dali
def test_dali_reads_the_multi_label_members(multi):
    from nvidia.dali import fn, pipeline_def

    manifest = Manifest.read(multi)
    shards = manifest.splits["train"].shards

    @pipeline_def(batch_size=len(WANT), num_threads=1, device_id=None)
    def pipe():
        return tuple(fn.readers.webdataset(paths=[str(multi / s["name"]) for s in shards],
                                           index_paths=[str(multi / s["index"]) for s in shards],
                                           ext=["jpg", "classes.json", "json"]))

    p = pipe()
    p.build()
    _, classes, extras = p.run()
    read = sorted(json.loads(bytes(np.array(extras[k])))["note"] for k in range(len(WANT)))
    assert read == sorted(f"n{i}" for i in range(len(WANT)))
    assert all(isinstance(json.loads(bytes(np.array(classes[k]))), list) for k in range(len(WANT)))


def test_older_datasets_load_and_newer_ones_are_refused(colour_dataset, tmp_path):
    import shutil

    old = tmp_path / "old.iof"
    shutil.copytree(colour_dataset, old)
    raw = json.loads((old / MANIFEST_NAME).read_text())
    raw["version"] = 3
    del raw["targets"]
    (old / MANIFEST_NAME).write_text(json.dumps(raw))
    with iofeed.loader(str(old), batch_size=4, image_size=24, workers=1,
                       output=iofeed.Output(target="multi_hot")) as ld:
        _, labels = next(iter(ld))
        assert labels.shape == (4, 4)
    raw["version"] = FORMAT_VERSION + 1
    (old / MANIFEST_NAME).write_text(json.dumps(raw))
    with pytest.raises(DatasetError, match=f"newer iofeed \\(format version {FORMAT_VERSION + 1}.*upgrade iofeed"):
        Manifest.read(old)


def test_a_missing_targets_file_is_a_one_line_error_naming_it(multi, tmp_path):
    import shutil

    damaged = tmp_path / "damaged.iof"
    shutil.copytree(multi, damaged)
    (damaged / "train-targets.jsonl").unlink()
    with pytest.raises(DatasetError, match="cannot read .*damaged.iof/train-targets.jsonl"):
        iofeed.loader(str(damaged), batch_size=3, image_size=24, workers=1, output=iofeed.Output(target="multi_hot"))


@pytest.mark.parametrize("bad", [99, -1])
def test_a_class_out_of_range_in_the_targets_file_names_the_file_and_line(multi, tmp_path, capsys, bad):
    """It said "a class index outside 0..2 in the targets file", naming neither file nor row."""
    import shutil

    from iofeed.cli.main import main

    damaged = tmp_path / "damaged.iof"
    shutil.copytree(multi, damaged)
    lines = (damaged / "train-targets.jsonl").read_text().splitlines()
    row = json.loads(lines[4])
    lines[4] = json.dumps([[*row[0][:-1], bad], row[1]])
    (damaged / "train-targets.jsonl").write_text("\n".join(lines) + "\n")
    says = rf"damaged\.iof/train-targets\.jsonl line 5: class index {bad} is outside 0\.\.2"
    with pytest.raises(DatasetError, match=says) as caught:
        iofeed.loader(str(damaged), batch_size=3, image_size=24, workers=1, output=iofeed.Output(target="multi_hot"))
    assert "\n" not in str(caught.value)
    assert main(["inspect", "--verify", str(damaged)]) != 0
    assert re.search(says, capsys.readouterr().out)


def test_a_fractional_class_in_the_targets_file_is_malformed_not_truncated(multi, tmp_path):
    """`int(c)` read a tampered 1.5 as class 1 without a word."""
    import shutil

    damaged = tmp_path / "damaged.iof"
    shutil.copytree(multi, damaged)
    lines = (damaged / "train-targets.jsonl").read_text().splitlines()
    lines[2] = json.dumps([[1.5], None])
    (damaged / "train-targets.jsonl").write_text("\n".join(lines) + "\n")
    with pytest.raises(DatasetError, match=r"malformed targets file .*train-targets\.jsonl: line 3: class indices "
                                           r"must be integers, got \[1\.5\]"):
        iofeed.loader(str(damaged), batch_size=3, image_size=24, workers=1, output=iofeed.Output(target="multi_hot"))


def test_verify_accepts_a_multi_label_dataset(multi, capsys):
    from iofeed.cli.main import main

    assert main(["inspect", "--verify", str(multi)]) == 0
    assert f"verified      {len(WANT)} samples" in capsys.readouterr().out


@pytest.mark.storage
def test_streamed_dataset_brings_its_targets(multi, tmp_path):
    from helpers.storage import CountingServer

    server = CountingServer(multi.parent)
    try:
        with iofeed.loader(f"{server.url}/{multi.name}", batch_size=4, image_size=24, workers=1,
                           output=iofeed.Output(target="multi_hot", extras=True),
                           cache=iofeed.Cache(dir=tmp_path / "cache"), shuffle="global") as ld:
            _, labels, extras = next(iter(ld))
            for row, index in enumerate(ld.last_indices):
                vector, extra = _want_vector(multi, int(index))
                assert np.array_equal(labels[row], vector) and extras[row] == extra
    finally:
        server.close()
    assert server.gets[f"/{multi.name}/train-targets.jsonl"] == 1
