"""Tampered and odd datasets (issue 22): verify checks bytes, tables are checked at open, FIFOs
named like dataset files are refused instead of waited on."""
from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import iofeed
from iofeed.cli.main import main
from iofeed.errors import DatasetError
from iofeed.format.manifest import Manifest
from iofeed.prepare.verify import verify_dataset
from iofeed.sources.samples import open_source


def _copy(dataset: Path, tmp_path: Path) -> Path:
    out = tmp_path / "copy.iof"
    shutil.copytree(dataset, out)
    return out


def _edit_manifest(out: Path, edit) -> None:
    raw = json.loads((out / "iofeed.json").read_text())
    edit(raw)
    (out / "iofeed.json").write_text(json.dumps(raw))


def _err_line(capsys) -> str:
    """The one error line on stderr, beside the progress lines a long step prints in a log."""
    err = capsys.readouterr().err.strip()
    lines = [line for line in err.splitlines() if not re.match(r"^[\w -]+: \d+/\d+ ", line)]
    assert "Traceback" not in err and len(lines) == 1, err
    return lines[0]


# ------------------------------------------------------------------ 22.4: verify that verifies


def test_verify_finds_64_zeroed_bytes_inside_a_jpeg(colour_dataset, tmp_path, capsys):
    out = _copy(colour_dataset, tmp_path)
    table = np.load(out / "train-samples.npy")
    row = table[0]
    shard = out / Manifest.read(out).splits["train"].shards[int(row["shard"])]["name"]
    data = bytearray(shard.read_bytes())
    at = int(row["offset"]) + int(row["size"]) // 2
    data[at:at + 64] = bytes(64)
    shard.write_bytes(bytes(data))
    problems = verify_dataset(out).problems
    assert any(shard.name in p and "sha256" in p and "its bytes changed" in p for p in problems), problems
    assert main(["inspect", str(out), "--verify"]) == 1
    assert "failed verification" in _err_line(capsys)


def test_verify_refuses_an_all_zero_sha256(colour_dataset, tmp_path, capsys):
    out = _copy(colour_dataset, tmp_path)
    _edit_manifest(out, lambda raw: raw["splits"]["val"]["shards"][0].update(sha256="0" * 64))
    problems = verify_dataset(out).problems
    assert len(problems) == 1 and "the manifest says '000000" in problems[0]
    assert main(["inspect", str(out), "--verify"]) == 1


def test_verify_decodes_every_jpeg(colour_dataset, tmp_path, capsys):
    """A sample that no longer decodes is named even where the manifest's sha256 was updated to match."""
    out = _copy(colour_dataset, tmp_path)
    table = np.load(out / "val-samples.npy")
    row = table[1]
    info = Manifest.read(out).splits["val"].shards[int(row["shard"])]
    shard = out / info["name"]
    data = bytearray(shard.read_bytes())
    data[int(row["offset"]):int(row["offset"]) + 64] = bytes(64)  # the JPEG header
    shard.write_bytes(bytes(data))
    import hashlib

    digest = hashlib.sha256(bytes(data)).hexdigest()
    _edit_manifest(out, lambda raw: [s.update(sha256=digest) for s in raw["splits"]["val"]["shards"]
                                     if s["name"] == info["name"]])
    problems = verify_dataset(out).problems
    assert len(problems) == 1 and "does not decode" in problems[0], problems
    assert main(["inspect", str(colour_dataset), "--verify"]) == 0
    out_text = capsys.readouterr().out
    assert "sha256 match the manifest" in out_text and "all 40 JPEG samples decode" in out_text


# ------------------------------------------------------------------ 22.9: FIFOs never hang


def _fifo_in_place_of(out: Path, name: str) -> None:
    (out / name).unlink()
    os.mkfifo(out / name)


@pytest.mark.parametrize("name", ["train-samples.npy", "iofeed.json", "train-000000.tar", "train-000000.idx",
                                  "train-samples.sources.jsonl"])
def test_a_fifo_named_like_a_dataset_file_is_refused_not_waited_on(colour_dataset, tmp_path, name):
    out = _copy(colour_dataset, tmp_path)
    _fifo_in_place_of(out, name)
    code = f"from iofeed.cli.main import main\nraise SystemExit(main(['inspect', {str(out)!r}, '--verify']))"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, env=env)
    assert done.returncode == 1, done.stderr
    assert "is not a regular file (a FIFO)" in done.stderr and name in done.stderr
    if name.endswith((".npy", ".json", ".tar", ".idx")):
        loading = f"import iofeed\nwith iofeed.loader({str(out)!r}, batch_size=4, workers=1) as ld:\n    list(ld)"
        done = subprocess.run([sys.executable, "-c", loading], capture_output=True, text=True, timeout=300, env=env)
        assert done.returncode == 1 and "is not a regular file (a FIFO)" in done.stderr.strip().splitlines()[-1]


# ------------------------------------------------------------------ 22.5: the table is checked at open


@pytest.mark.parametrize("column, value, says", [
    ("label", 999, "labels outside 0..3 (the manifest has 4 classes)"), ("label", -1, "labels outside 0..3"),
    ("label", 4, "labels outside 0..3"), ("encoding", 7, "unknown encodings (known: 0 jpeg, 1 raw)"),
    ("size", 2**40, "samples outside their shard"), ("offset", -512, "samples outside their shard"),
    ("offset", 100, "samples not at a tar block boundary"),
])
def test_a_table_the_manifest_rules_out_is_refused_at_open(colour_dataset, tmp_path, capsys, column, value, says):
    out = _copy(colour_dataset, tmp_path)
    table = np.load(out / "train-samples.npy")
    table[column][3] = value
    np.save(out / "train-samples.npy", table)
    with pytest.raises(DatasetError) as info:
        open_source(out)
    message = str(info.value)
    assert "train-samples.npy does not match its manifest" in message and says in message
    assert "first row 3" in message and "run `iofeed preprocess` again" in message and "\n" not in message
    with pytest.raises(DatasetError, match=says.split(" (")[0]):
        iofeed.loader(out, batch_size=4, workers=1)
    assert main(["inspect", str(out), "--verify"]) == 1


# ------------------------------------------------------------------ 22.15: malformed manifest values


@pytest.mark.parametrize("edit, says", [
    (lambda raw: raw["splits"]["train"].update(samples="10"), "\"samples\" of split 'train' must be an integer"),
    (lambda raw: raw.update(classes=5), '"classes" must be a list of names, got 5'),
    (lambda raw: raw.update(version=True), "format version True"),
    (lambda raw: raw["splits"]["val"]["shards"][0].update(bytes=None), '"bytes" of shard 0 of split \'val\''),
    (lambda raw: raw["splits"]["val"]["shards"][0].update(sha256=0), '"sha256" of shard 0 of split \'val\''),
    (lambda raw: raw["splits"].update(val=[]), "split 'val' must be an object"),
    (lambda raw: raw["splits"]["val"]["shards"][0].update(bytes=2**70), "must be an integer in 0..2^63-1"),
])
def test_malformed_manifest_values_name_the_key_and_file(colour_dataset, tmp_path, capsys, edit, says):
    out = _copy(colour_dataset, tmp_path)
    _edit_manifest(out, edit)
    with pytest.raises(DatasetError) as info:
        open_source(out)
    assert says in str(info.value) and str(out / "iofeed.json") in str(info.value)
    assert main(["inspect", str(out)]) == 1
    assert says in _err_line(capsys)


# ------------------------------------------------------------------ 22.13, 22.14: errors in one line, right cause

_LOAD = """
import resource, sys
import iofeed
from iofeed.errors import IofeedError
if {limit}:
    hard = {limit} if {hard} else resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    resource.setrlimit(resource.RLIMIT_NOFILE, ({limit}, hard))
try:
    with iofeed.loader({path!r}, batch_size=4, workers=2, image_size=32, drop_last=False) as ld:
        print(sum(len(labels) for _, labels in ld))
except IofeedError as exc:
    print(type(exc).__name__, str(exc), sep="|", file=sys.stderr)
    raise SystemExit(1)
"""


def _load_in_child(path: Path, limit: int = 0, hard: bool = False) -> subprocess.CompletedProcess:
    """Load every batch of `path` in a child whose soft open-file limit is `limit` (and its hard one, with `hard`)."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    return subprocess.run([sys.executable, "-c", _LOAD.format(path=str(path), limit=limit, hard=hard)],
                          capture_output=True, text=True, timeout=120, env=env)


@pytest.fixture
def many_shards(tmp_path) -> Path:
    """A raw dataset of one shard per sample (~36 train shards)."""
    from helpers.images import make_colour_tree
    from iofeed.prepare.run import ImagePolicy, preprocess

    out = tmp_path / "many.iof"
    preprocess(make_colour_tree(tmp_path / "t", per_class=10), out, policy=ImagePolicy(format="raw"),
               shard_bytes=1 << 16, val_per_class=1, progress=False, workers=1)
    assert len(Manifest.read(out).splits["train"].shards) > 30
    return out


@pytest.mark.slow
@pytest.mark.parametrize("hard", [False, True])
def test_a_low_open_file_limit_does_not_stop_a_loader_over_many_shards(many_shards, hard):
    """Issue 22.14: under `ulimit -n 40` this failed (as "dataset was replaced"). Workers raise their
    soft limit, or within a hard one close the least recently used shards."""
    done = _load_in_child(many_shards, limit=40, hard=hard)
    assert done.returncode == 0, done.stderr
    assert int(done.stdout.split()[-1]) == 36


def test_out_of_descriptors_is_said_with_the_file_not_as_a_replaced_dataset(colour_dataset):
    code = f"""
import os, resource
from iofeed.errors import SourceError
from iofeed.sources.samples import open_source
resource.setrlimit(resource.RLIMIT_NOFILE, (64, resource.getrlimit(resource.RLIMIT_NOFILE)[1]))
held = []
try:
    while True:
        held.append(os.open(os.devnull, os.O_RDONLY))
except OSError:
    pass  # none left
try:
    open_source({str(colour_dataset)!r})
except SourceError as exc:
    print(exc)
"""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, env=env)
    message = done.stdout.strip()
    assert "too many open files (this process's limit; `ulimit -n` is 64)" in message, done.stderr
    assert str(colour_dataset) in message and "replaced" not in message


def test_a_dataset_replaced_under_a_worker_is_one_line(colour_dataset, tmp_path):
    from helpers.images import make_image_tree
    from iofeed.prepare.run import preprocess

    out = _copy(colour_dataset, tmp_path)
    with iofeed.loader(out, batch_size=4, workers=1, image_size=32) as ld:
        make_image_tree(tmp_path / "b", classes=4, per_class=7)
        preprocess(tmp_path / "b", out, progress=False, workers=1, overwrite=True, shard_bytes=1 << 16)
        with pytest.raises(DatasetError) as info:
            list(ld)
    assert "was replaced after it was opened" in str(info.value) and "\n" not in str(info.value)


# ------------------------------------------------------------------ sweep: more tampering


def test_a_table_header_claiming_terabytes_is_one_line(colour_dataset, tmp_path):
    """It was a MemoryError: numpy allocated what the header claimed before reading."""
    from iofeed.format.table import SAMPLE_DTYPE

    out = _copy(colour_dataset, tmp_path)
    path = out / "train-samples.npy"
    rows = np.load(path).tobytes()
    with open(path, "wb") as f:
        header = {"descr": np.lib.format.dtype_to_descr(SAMPLE_DTYPE), "fortran_order": False, "shape": (10**11,)}
        np.lib.format.write_array_header_1_0(f, header)
        f.write(rows)
    with pytest.raises(DatasetError, match=r"header claims shape \(100000000000,\).* 1,184 bytes follow"):
        open_source(out)


def test_an_empty_sample_in_the_table_is_refused(colour_dataset, tmp_path):
    out = _copy(colour_dataset, tmp_path)
    table = np.load(out / "val-samples.npy")
    table["size"][2] = 0
    np.save(out / "val-samples.npy", table)
    with pytest.raises(DatasetError, match="1 row.s. with empty samples .size 0 or less., first row 2"):
        open_source(out, "val")


def test_a_folder_file_replaced_by_a_fifo_after_the_scan_is_skipped_not_waited_on(tmp_path):
    from helpers.images import make_colour_tree

    root = make_colour_tree(tmp_path / "t", per_class=10)
    with iofeed.loader(root, batch_size=4, workers=1, split="val", image_size=16) as ld:
        victim = root / "004.colour3" / "0009.jpg"  # read last: after the scan, before its batch
        victim.unlink()
        os.mkfifo(victim)
        delivered = sum(len(labels) for _, labels in ld)
        assert delivered == 39 and ld.stats.skipped["not a regular file"] == 1 and ld.stats.refilled == 0


@pytest.mark.parametrize("edit", [lambda raw: raw.update(image=5), lambda raw: raw.update(source={}),
                                  lambda raw: raw["source"].update(stored={"samples": 1})])
def test_inspect_of_a_manifest_with_broken_summary_fields_is_one_line(colour_dataset, tmp_path, capsys, edit):
    out = _copy(colour_dataset, tmp_path)
    _edit_manifest(out, edit)
    assert main(["inspect", str(out)]) == 1
    assert f"malformed manifest {out / 'iofeed.json'}" in _err_line(capsys)


@pytest.mark.slow
def test_workers_that_cannot_start_for_want_of_descriptors_say_so(colour_dataset):
    done = _load_in_child(colour_dataset, limit=16)
    assert done.returncode == 1, done.stdout + done.stderr
    kind, message = done.stderr.strip().splitlines()[-1].split("|")
    assert kind == "StartError" and message.startswith("cannot start a loader worker: ")
    assert "Too many open files (raise the open-file limit" in message or "check `ulimit -n`" in message


def test_a_shard_of_the_wrong_size_is_refused_at_open(tmp_path):
    """A shard truncated, or a symlink to another shard in its place, was read with the wrong table."""
    from helpers.images import make_colour_tree
    from iofeed.prepare.run import preprocess

    out = tmp_path / "d.iof"
    preprocess(make_colour_tree(tmp_path / "t", per_class=6), out, shard_bytes=1 << 16, progress=False, workers=1)
    splits = Manifest.read(out).splits
    shards = [out / s["name"] for s in splits["train"].shards]
    other = next(p for p in (out / s["name"] for s in splits["val"].shards + splits["train"].shards)
                 if p.stat().st_size != shards[0].stat().st_size)
    shards[0].unlink()
    shards[0].symlink_to(other.name)
    with pytest.raises(DatasetError, match=f"{shards[0].name} is {other.stat().st_size:,} bytes, the manifest says"):
        iofeed.loader(out, batch_size=4, workers=1)


def test_verify_of_a_raw_dataset_says_what_it_checked(many_shards, capsys):
    assert main(["inspect", str(many_shards), "--verify"]) == 0
    last = capsys.readouterr().out.strip().splitlines()[-1]
    assert last.endswith("labels agree; 40 raw samples have their sizes") and "sha256 match" in last
