"""`preprocess(engine="ray")` on a real local Ray instance: the same dataset as the local engine,
and files whose task fails are retried by Ray, then rejected with the reason, never lost."""
from __future__ import annotations

import json
import os
from dataclasses import replace
from pathlib import Path

import pytest

from iofeed.cli.main import main
from iofeed.format.manifest import Manifest
from iofeed.prepare.run import preprocess

ray = pytest.importorskip("ray")
pytestmark = [pytest.mark.ray, pytest.mark.slow]  # each test ~3 s on 2 cores


@pytest.fixture(scope="module", autouse=True)
def ray_instance():
    """One local Ray instance (2 CPUs) for the module; preprocess uses it and leaves it running."""
    ray.init(num_cpus=2, include_dashboard=False, logging_level="WARNING")
    yield
    ray.shutdown()


def _files(out: Path) -> dict[str, bytes]:
    kept = {".tar", ".idx", ".npy", ".jsonl", ".txt"}
    return {p.name: p.read_bytes() for p in sorted(out.iterdir()) if p.suffix in kept}


def _assert_same_dataset(one: Path, two: Path) -> None:
    files = _files(one)
    assert any(name.endswith(".tar") for name in files) and "rejected.jsonl" in files
    assert files.keys() == _files(two).keys()
    for name, data in _files(two).items():
        assert files[name] == data, f"{name} differs"
    first, second = Manifest.read(one), Manifest.read(two)
    assert first.dataset_id != second.dataset_id, "every write has its own dataset id"
    assert replace(first, dataset_id="") == replace(second, dataset_id="")


def test_ray_engine_writes_the_same_dataset_as_local(quirky_tree, tmp_path):
    src, valid, rejected = quirky_tree
    options = dict(val_per_class=1, shard_bytes=1 << 16, seed=5, progress=False)
    local = preprocess(src, tmp_path / "local.iof", workers=2, **options)
    by_ray = preprocess(src, tmp_path / "ray.iof", engine="ray", **options)
    _assert_same_dataset(local.out, by_ray.out)
    assert by_ray.written == local.written and sum(by_ray.written.values()) == len(valid)
    assert by_ray.rejected == local.rejected and sum(by_ray.rejected.values()) == len(rejected)
    assert Manifest.read(by_ray.out).source == Manifest.read(local.out).source


def test_a_file_failing_once_is_retried_and_kept(quirky_tree, tmp_path, monkeypatch):
    import iofeed.prepare.ray as engine

    src, _, _ = quirky_tree
    marker = tmp_path / "failed-once"
    real = engine.prepare_file

    def flaky(index, path, policy, span=(0, -1)):  # defined here, so Ray ships it by value to its workers
        if path.endswith("big.jpg") and not os.path.exists(marker):
            Path(marker).touch()
            raise ConnectionResetError("transient")
        return real(index, path, policy, span)

    monkeypatch.setattr(engine, "prepare_file", flaky)
    by_ray = preprocess(src, tmp_path / "ray.iof", engine="ray", progress=False)
    local = preprocess(src, tmp_path / "local.iof", workers=1, progress=False)
    assert marker.exists(), "the first attempt failed"
    _assert_same_dataset(local.out, by_ray.out)


def test_a_file_failing_everywhere_is_rejected_with_its_reason(quirky_tree, tmp_path, monkeypatch):
    import iofeed.prepare.ray as engine

    src, valid, rejected = quirky_tree
    real = engine.prepare_file
    attempts = tmp_path / "attempts"
    attempts.mkdir()

    def broken(index, path, policy, span=(0, -1)):
        if path.endswith("cmyk.jpg"):
            (attempts / str(len(list(attempts.iterdir())))).touch()
            raise RuntimeError(f"decoder exploded on {Path(path).name}")
        return real(index, path, policy, span)

    monkeypatch.setattr(engine, "prepare_file", broken)
    summary = preprocess(src, tmp_path / "ray.iof", engine="ray", progress=False)
    lines = [json.loads(line) for line in (summary.out / "rejected.jsonl").read_text().splitlines()]
    listed = {entry["path"]: entry["reason"] for entry in lines}
    assert set(listed) == set(rejected) | {"001.class0/cmyk.jpg"}, "every other file is written"
    reason = listed["001.class0/cmyk.jpg"]
    assert reason.startswith(engine.FAILED) and "RuntimeError: decoder exploded on cmyk.jpg" in reason
    assert len(list(attempts.iterdir())) == 1 + 1 + engine.RETRIES, "in its batch, then alone with retries"
    assert summary.rejected[engine.FAILED] == 1
    assert sum(summary.written.values()) == len(valid) - 1
    assert Manifest.read(summary.out).source["rejected_by_reason"][engine.FAILED] == 1


def test_a_file_crashing_its_worker_is_rejected_not_lost(image_tree, tmp_path, monkeypatch):
    import iofeed.prepare.ray as engine

    src, expected = image_tree
    real = engine.prepare_file

    def crashing(index, path, policy, span=(0, -1)):
        if path.endswith("002_0003.jpg"):
            os._exit(1)  # the worker process dies, as on a segfault in a decoder
        return real(index, path, policy, span)

    monkeypatch.setattr(engine, "prepare_file", crashing)
    monkeypatch.setattr(engine, "RETRIES", 1)
    summary = preprocess(src, tmp_path / "ray.iof", engine="ray", progress=False)
    listed = [json.loads(line) for line in (summary.out / "rejected.jsonl").read_text().splitlines()]
    assert [entry["path"] for entry in listed] == ["002.class1/002_0003.jpg"]
    assert listed[0]["reason"].startswith(engine.FAILED)
    assert sum(summary.written.values()) == len(expected) - 1, "the crashed task's other files are kept"


def test_cli_engine_ray(image_tree, tmp_path, capsys):
    src, expected = image_tree
    assert main(["preprocess", str(src), "-o", str(tmp_path / "o.iof"), "--engine", "ray"]) == 0
    assert f"images found  {len(expected)}" in capsys.readouterr().out



def test_ray_engine_reads_tar_members_by_their_span(tmp_path):
    from helpers.sources import write_webdataset

    write_webdataset(tmp_path / "wds")
    options = dict(val_fraction=0, progress=False)
    local = preprocess(str(tmp_path / "wds"), tmp_path / "local.iof", workers=1, **options)
    by_ray = preprocess(str(tmp_path / "wds"), tmp_path / "ray.iof", engine="ray", workers=2, **options)
    _assert_same_dataset(local.out, by_ray.out)
    assert sum(by_ray.written.values()) == 12 and sum(by_ray.rejected.values()) == 3
