"""Shard identity (issue 29, items 9, 10, 11, 17 and the URL verify message): shards changed after
`iofeed index` or swapped for a sibling of the same size are refused by name at open, `--verify`
reads the labels and the targets file again, and a FIFO targets file is refused, not waited on."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import iofeed
from helpers.adversarial import build, relabel_in_place, rotate_members, sibling_in_place
from helpers.pixelcode import decode
from iofeed.cli.main import main
from iofeed.errors import DatasetError
from iofeed.format.manifest import Manifest
from iofeed.prepare.index import index_shards
from iofeed.prepare.run import preprocess
from iofeed.prepare.verify import verify_dataset

EVAL = iofeed.Recipe(train=False, crop_fraction=1.0)


@pytest.fixture(scope="module")
def shards(tmp_path_factory) -> Path:
    """Three clean WebDataset shards of 8 pixel-coded samples (classes 0..2), never changed."""
    return Path(build("webdataset", "clean", tmp_path_factory.mktemp("wds")).shards[0]).parent


def _indexed(shards: Path, tmp_path: Path) -> tuple[Path, list[Path]]:
    """A copy of `shards` indexed in place: (the index, its shards)."""
    copy = tmp_path / "wds"
    shutil.copytree(shards, copy)
    index_shards(str(copy / "shard-{000000..000002}.tar"), tmp_path / "ds.iof")
    return tmp_path / "ds.iof", sorted(copy.glob("*.tar"))


def _one_line(capsys) -> str:
    """The error line on stderr (beside verify's progress lines)."""
    err = capsys.readouterr().err.strip()
    assert "Traceback" not in err and err.splitlines()[-1].startswith("iofeed: error: "), err
    return err.splitlines()[-1]


def _delivered(ds: Path) -> dict[int, str]:
    """{sample number from the pixels: class name the loader gave it}."""
    classes, seen = Manifest.read(ds).classes, {}
    with iofeed.loader(str(ds), batch_size=4, image_size=32, workers=1, augment=EVAL, drop_last=False) as ld:
        for images, labels in ld:
            for image, label in zip(images, labels):
                seen[decode(image)[1]] = classes[int(label)]
    return seen


def test_the_index_records_each_shards_identity(shards, tmp_path):
    ds, tars = _indexed(shards, tmp_path)
    for shard, tar in zip(Manifest.read(ds).splits["train"].shards, tars):
        assert shard["bytes"] == tar.stat().st_size and shard["mtime_ns"] == tar.stat().st_mtime_ns
        assert len(shard["sha256"]) == len(shard["probe"]) == 64


@pytest.mark.parametrize("change", [rotate_members, relabel_in_place], ids=["members-rotated", "cls-in-place"])
def test_a_shard_changed_after_index_is_refused_at_open_and_by_verify(shards, tmp_path, capsys, change):
    ds, tars = _indexed(shards, tmp_path)
    says = change(tars[1])
    with pytest.raises(DatasetError, match=says):
        iofeed.loader(str(ds), batch_size=4, workers=1)
    assert main(["inspect", "--verify", str(ds)]) == 1
    assert tars[1].name in _one_line(capsys) and "labels agree" not in capsys.readouterr().out


def test_verify_reads_the_labels_again_even_where_the_shard_kept_its_identity(shards, tmp_path):
    """A `.cls` rewritten in place, the manifest's identity then forged to match: the labels read
    again from the shard disagree with the table, sample named."""
    ds, tars = _indexed(shards, tmp_path)
    relabel_in_place(tars[0])
    raw = json.loads((ds / "iofeed.json").read_text())
    forged = next(s for s in raw["splits"]["train"]["shards"] if s["url"] == str(tars[0]))
    fd = os.open(tars[0], os.O_RDONLY)
    try:
        from iofeed.format.identity import identity_of

        forged.update(identity_of(fd, in_place=True))
    finally:
        os.close(fd)
    (ds / "iofeed.json").write_text(json.dumps(raw))
    problems = verify_dataset(ds).problems
    assert len(problems) == 1 and f"{tars[0]}#s0000: its shard now labels it '1', the table '0'" in problems[0]


def test_a_touched_but_unchanged_shard_still_loads_every_sample_with_its_label(shards, tmp_path):
    ds, tars = _indexed(shards, tmp_path)
    os.utime(tars[2], ns=(1, 1))  # an mtime that moved: the loader hashes it, and it is the same
    seen = _delivered(ds)
    assert seen == {n: str(n % 3) for n in range(24)}


def test_a_sibling_of_the_same_size_in_place_of_an_indexed_shard_is_refused(shards, tmp_path):
    ds, tars = _indexed(shards, tmp_path)
    assert tars[0].stat().st_size == tars[2].stat().st_size
    with pytest.raises(DatasetError, match=sibling_in_place(tars[0])):
        iofeed.loader(str(ds), batch_size=4, workers=1)


def test_a_sibling_of_the_same_size_in_place_of_a_preprocessed_shard_is_refused(tmp_path):
    src = build("folder", "clean", tmp_path / "src", count=120)
    out = tmp_path / "d.iof"
    preprocess(src.spec, out, val_fraction=0, shard_bytes=64 << 10, progress=False, workers=1)
    tars = [out / s["name"] for s in Manifest.read(out).splits["train"].shards]
    same = [t for t in tars if t.stat().st_size == tars[0].stat().st_size]
    assert len(same) >= 2, "shards of whole 10 KiB records: most share a size"
    with pytest.raises(DatasetError, match=sibling_in_place(same[0])):
        iofeed.loader(str(out), batch_size=4, workers=1)


# ------------------------------------------------------------------ item 10: the targets file is verified


@pytest.fixture(scope="module")
def with_targets(tmp_path_factory) -> Path:
    """A labels-CSV dataset whose `note` column is each sample's extra: it has a targets file."""
    root = tmp_path_factory.mktemp("targets")
    src = build("labels-csv", "clean", root)
    return preprocess(src.spec, root / "t.iof", val_fraction=0, progress=False, workers=1, **src.options).out


def _first_row(line: str) -> str:
    row = json.loads(line)
    row[1]["note"] = "changed"
    return json.dumps(row)


@pytest.mark.parametrize("damage, says", [
    (lambda t: t.write_text(_first_row(t.read_text().splitlines()[0]) + "\n"
                            + "".join(f"{x}\n" for x in t.read_text().splitlines()[1:])),
     r"train-targets\.jsonl row 1: .*changed.*its shard holds .*n\d+"),
    (lambda t: t.write_text(t.read_text().replace("[0]", "[1]", 1)), r"row \d+: \[\[1\].*its shard holds \[\[0\]"),
    (lambda t: t.unlink(), r"train-targets\.jsonl: No such file"),
    (lambda t: t.write_text("".join(f"{x}\n" for x in t.read_text().splitlines()[:-1])), r"has 23 rows, the sample"),
    (lambda t: t.write_text(t.read_text().replace("]", "", 1)), r"malformed targets file"),
    (lambda t: (t.unlink(), os.mkfifo(t)), r"train-targets\.jsonl is not a regular file \(a FIFO\)"),
], ids=["extra-changed", "class-changed", "deleted", "short", "malformed", "fifo"])
def test_verify_reads_the_targets_file(with_targets, tmp_path, damage, says):
    out = tmp_path / "t.iof"
    shutil.copytree(with_targets, out)
    assert verify_dataset(out).problems == []
    damage(out / "train-targets.jsonl")
    problems = verify_dataset(out).problems
    assert len(problems) == 1 and __import__("re").search(says, problems[0]), problems


def test_a_fifo_named_like_the_targets_file_is_refused_by_the_loader_not_waited_on(with_targets, tmp_path):
    out = tmp_path / "t.iof"
    shutil.copytree(with_targets, out)
    (out / "train-targets.jsonl").unlink()
    os.mkfifo(out / "train-targets.jsonl")
    code = (f"import iofeed\nwith iofeed.loader({str(out)!r}, batch_size=4, workers=1, "
            "output=iofeed.Output(extras=True)) as ld:\n    list(ld)")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, env=env)
    assert done.returncode == 1, done.stderr
    assert "train-targets.jsonl is not a regular file (a FIFO)" in done.stderr.strip().splitlines()[-1]


# ------------------------------------------------------------------ verify says what it checked


@pytest.mark.storage
def test_verify_of_url_shards_says_it_did_not_read_them(shards, tmp_path, capsys):
    from helpers.storage import CountingServer

    server = CountingServer(shards)
    try:
        assert main(["index", f"{server.url}/shard-{{000000..000002}}.tar", "-o", str(tmp_path / "ds.iof")]) == 0
        capsys.readouterr()
        gets = sum(server.gets.values())
        assert main(["inspect", "--verify", str(tmp_path / "ds.iof")]) == 0
        assert sum(server.gets.values()) == gets, "verify fetched nothing"
    finally:
        server.close()
    line = capsys.readouterr().out.strip().splitlines()[-1]
    assert "3 shards at URLs (24 samples) not read: only their index and table rows checked" in line
    assert "sha256 match" not in line and "samples decode" not in line and "labels agree" not in line


def test_a_dataset_written_before_probes_still_loads(tmp_path):
    """`probe` and `mtime_ns` are optional: a manifest without them is checked by size, as before."""
    src = build("folder", "clean", tmp_path / "src")
    out = preprocess(src.spec, tmp_path / "d.iof", val_fraction=0, progress=False, workers=1).out
    raw = json.loads((out / "iofeed.json").read_text())
    for shard in raw["splits"]["train"]["shards"]:
        del shard["probe"]
    (out / "iofeed.json").write_text(json.dumps(raw))
    assert sorted(_delivered(out).items()) == sorted({i.sample: i.expect for i in src.items}.items())


def test_verify_names_a_probe_that_does_not_match_its_shard(tmp_path):
    src = build("folder", "clean", tmp_path / "src")
    out = preprocess(src.spec, tmp_path / "d.iof", val_fraction=0, progress=False, workers=1).out
    raw = json.loads((out / "iofeed.json").read_text())
    raw["splits"]["train"]["shards"][0]["probe"] = "0" * 64
    (out / "iofeed.json").write_text(json.dumps(raw))
    problems = verify_dataset(out).problems
    assert problems == [f"{out / 'train-000000.tar'}: its sampled blocks do not match the manifest's probe"]
    with pytest.raises(DatasetError, match="train-000000.tar is not the shard the manifest was written for"):
        iofeed.loader(str(out), batch_size=4, workers=1)


def test_dalis_validation_refuses_a_fifo_in_a_folder_instead_of_waiting(tmp_path):
    """The DALI engine decodes every folder file when it starts: one made a FIFO after the scan is
    'not a regular file', like the workers engine says, never a read that waits for a writer."""
    os.mkfifo(tmp_path / "x.jpg")
    fifo = str(tmp_path / "x.jpg").encode()
    code = f"from iofeed.engines.dali.validate import check_file\nprint(check_file({fifo!r}))"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, env=env)
    assert done.returncode == 0 and done.stdout.strip() == "not a regular file", done.stderr
