"""Every source kind x (`preprocess`, `index`) x (local, http on 127.0.0.1, moto's S3), clean and
damaged (`helpers/adversarial.py`), checked end to end through the loader: every sample kept
arrives exactly once with its right label (read from its pixels), every sample not kept is in
`rejected.jsonl`, counted as skipped, or the run is refused with a one-line error naming the
cause: kept + rejected = written. Damages done after the run (shards changed in place, a FIFO
targets file) must make the loader refuse by name, never serve old labels or hang.

Each case id is `kind-damage-op-storage` (see "What is checked, and where" in docs/formats.md)."""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

import iofeed
from helpers.adversarial import build, relabel_in_place, rotate_members, sibling_in_place
from helpers.pixelcode import Source, decode
from helpers.requirements import MODULES
from helpers.storage import CountingServer, free_port, moto_s3

for _name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):
    os.environ.setdefault(_name, "testing")
os.environ.setdefault("AWS_DEFAULT_REGION", "us-east-1")
BUCKET = "adversarial"
EVAL = iofeed.Recipe(train=False, crop_fraction=1.0)
MEMORY = 8 << 30  # a run that would build millions of class names fails fast instead of swapping
RUN_SECONDS = 120  # a run that waits on a FIFO fails instead of hanging the suite

LOCAL = {
    "folder": ["clean", "truncated", "fifo"],
    "webdataset": ["clean", "truncated", "truncated_mid", "bad_header", "duplicate_member", "two_images", "odd_labels",
                   "huge_label", "plus_labels", "short_captions", "fifo"],
    "parquet": ["clean", "truncated", "float_labels", "cut_file", "bad_footer"],
    "hf": ["clean", "truncated"],
    "labels-csv": ["clean", "truncated", "float_labels", "odd_labels", "plus_labels", "nan_inf", "spellings", "bom",
                   "fifo"],
    "labels-jsonl": ["clean", "odd_labels", "bom"],
    "captions": ["clean", "other_encoding", "missing_caption", "empty_caption", "malformed_json"],
}
AFTER_INDEX = {"rotated": rotate_members, "relabelled": relabel_in_place, "sibling": sibling_in_place}
CASES = (
    [(kind, damage, "preprocess", "local") for kind, damages in LOCAL.items() for damage in damages]
    + [("webdataset", damage, "index", "local") for damage in LOCAL["webdataset"] + list(AFTER_INDEX)]
    + [("folder", "sibling", "preprocess", "local")]
    + [("webdataset", damage, op, storage) for storage in ("http", "s3") for op in ("preprocess", "index")
       for damage in ("clean", "truncated", "duplicate_member")]
    + [(kind, "clean", "preprocess", storage) for storage in ("http", "s3") for kind in LOCAL if kind != "webdataset"]
)


def test_every_source_kind_can_be_written_here():
    """The matrix writes each source kind with the library users write it with: where one is not
    installed (Hugging Face `datasets`, pyarrow, moto, webdataset) the suite fails here, naming it,
    rather than skipping those cases (no dependency marker skips them either)."""
    import importlib

    for module in ("datasets", "pyarrow.parquet", "moto", "fsspec", "webdataset"):
        try:
            importlib.import_module(module)
        except ImportError as exc:
            pytest.fail(f"{module} is needed to write the adversarial sources ({exc}): install the test extras")
    assert not any(mark.name in MODULES for param in PARAMS for mark in param.marks)


@pytest.fixture(scope="module")
def s3():
    """moto's S3 on a loopback port with a bucket, the AWS variables pointing at it (the CLI runs
    and the loader's workers inherit them)."""
    import fsspec

    port = free_port()
    env = pytest.MonkeyPatch()
    env.setenv("AWS_ENDPOINT_URL", f"http://127.0.0.1:{port}")
    with moto_s3(port):
        fs = fsspec.filesystem("s3", endpoint_url=f"http://127.0.0.1:{port}", skip_instance_cache=True)
        fs.mkdir(BUCKET)
        yield fs
    env.undo()


# The memory bound is set by the child itself: a preexec_fn is unsafe beside the servers' threads.
BOUNDED_CLI = (f"import resource, runpy, sys\nresource.setrlimit(resource.RLIMIT_AS, ({MEMORY}, {MEMORY}))\n"
               "sys.argv[0] = 'iofeed'\nrunpy.run_module('iofeed.cli.main', run_name='__main__')")


def _cli(*args: str) -> subprocess.CompletedProcess:
    """`iofeed ARGS` as a user runs it, bounded in memory and time."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    try:
        return subprocess.run([sys.executable, "-c", BOUNDED_CLI, *args], capture_output=True, text=True, env=env,
                              timeout=RUN_SECONDS)
    except subprocess.TimeoutExpired:
        pytest.fail(f"`iofeed {' '.join(args)}` hung for {RUN_SECONDS} s (a FIFO waited on?)")


def _error_line(done: subprocess.CompletedProcess) -> str:
    err = done.stderr.strip()
    assert "Traceback" not in err and "MemoryError" not in err, err[-2000:]
    return err.splitlines()[-1] if err else f"(no message, exit status {done.returncode})"


def _publish(source: Source, tmp: Path, storage: str, s3) -> tuple[str, object]:
    """The spec to read `source` from `storage`: its shards served (WebDataset) or as they are."""
    if storage == "local" or source.kind != "webdataset":
        return source.spec, None
    folder = source.shards[0].parent
    if storage == "http":
        server = CountingServer(folder)
        return f"{server.url}/shard-{{000000..000002}}.tar", server
    prefix = f"{BUCKET}/{tmp.name}"
    for shard in source.shards:
        s3.put_file(str(shard), f"{prefix}/{shard.name}")
    return f"s3://{prefix}/shard-{{000000..000002}}.tar", None


def _run(source: Source, spec: str, op: str, out: str) -> subprocess.CompletedProcess:
    if op == "index":
        return _cli("index", spec, "-o", out)
    args = ["preprocess", spec, "-o", out, "--val-fraction", "0", "--workers", "1"]
    args += ["--labels", str(source.options["labels"])] if "labels" in source.options else []
    args += ["--label-column", source.options["label_column"]] if "label_column" in source.options else []
    args += ["--shard-mb", str(source.options["shard_mb"])] if "shard_mb" in source.options else []
    args += ["--label-names"] if source.options.get("label_names") else []
    args += ["--target", source.options["target"]] if "target" in source.options else []
    return _cli(*args)


def _read(url: str, name: str) -> str:
    from iofeed.sources.remote.urls import filesystem

    return filesystem(url).cat_file(f"{url}/{name}").decode()


def _load(dataset: str, cache: Path, engine: str) -> tuple[dict[int, list[tuple[int, int]]], Counter]:
    """{sample number: [(label code of its pixels, label the loader gave it), ...]}, skips by reason."""
    delivered: dict[int, list[str]] = {}
    with iofeed.loader(dataset, batch_size=4, image_size=32, workers=1, augment=EVAL, drop_last=False,
                       skips=iofeed.Skips(max_skipped=None), cache=iofeed.Cache(dir=cache), engine=engine) as ld:
        for images, labels in ld:
            for image, label in zip(images, labels):
                code, sample = decode(image)
                delivered.setdefault(sample, []).append((code, int(label)))
        skipped = Counter(ld.stats.skipped)
    return delivered, skipped


def _load_captions(dataset: str, cache: Path, engine: str) -> tuple[dict[int, list[tuple[int, str]]], Counter]:
    """As `_load`, with each sample's caption (`Output(target="text")`) where `_load` has its label."""
    delivered: dict[int, list[tuple[int, str]]] = {}
    with iofeed.loader(dataset, batch_size=4, image_size=32, workers=1, augment=EVAL, drop_last=False,
                       skips=iofeed.Skips(max_skipped=None), cache=iofeed.Cache(dir=cache), engine=engine,
                       output=iofeed.Output(target="text")) as ld:
        for images, texts in ld:
            for image, text in zip(images, texts):
                code, sample = decode(image)
                delivered.setdefault(sample, []).append((code, text))
        skipped = Counter(ld.stats.skipped)
    return delivered, skipped


def _param(case: tuple[str, str, str, str]) -> object:
    return pytest.param(*case, id="-".join(case), marks=[pytest.mark.storage] if case[3] != "local" else [])


PARAMS = [_param(case) for case in CASES]


@pytest.mark.parametrize("kind, damage, op, storage", PARAMS)
def test_every_sample_arrives_once_with_its_label_or_is_accounted_for(kind, damage, op, storage, tmp_path, request):
    _check_case(kind, damage, op, storage, tmp_path, request, "workers")


@pytest.mark.torchvision
@pytest.mark.parametrize("kind, damage, op, storage", [_param(case) for case in CASES if case[3] == "local"])
def test_the_nvjpeg_engine_delivers_every_sample_once_or_accounts_for_it(kind, damage, op, storage, tmp_path,
                                                                        request):
    """The same cases through the nvjpeg engine (its CPU form): its workers pack bytes unchecked, so a
    damaged image must be found before (shards indexed in place, folders) or at the batched decode."""
    _check_case(kind, damage, op, storage, tmp_path, request, "nvjpeg")


def _check_case(kind: str, damage: str, op: str, storage: str, tmp_path: Path, request: Any, engine: str) -> None:
    if storage == "s3":
        s3 = request.getfixturevalue("s3")
    else:
        s3 = None
    options = {"count": 120} if (kind, damage) == ("folder", "sibling") else {}
    source = build(kind, damage, tmp_path / "src", **options)
    if (kind, damage) == ("folder", "sibling"):
        source.options["shard_mb"] = 0.0625
        source.after = lambda ds: sibling_in_place(ds / _manifest(str(ds))["splits"]["train"]["shards"][0]["name"])
    if op == "index" and damage in AFTER_INDEX:
        change = AFTER_INDEX[damage]
        source.after = lambda ds: change(source.shards[1] if change is not sibling_in_place else source.shards[0])
    spec, server = _publish(source, tmp_path, storage, s3)
    local_out = tmp_path / "ds.iof"
    remote_out = storage == "s3" and op == "preprocess"
    out = f"s3://{BUCKET}/{tmp_path.name}/ds.iof" if remote_out else str(local_out)
    try:
        done = _run(source, spec, op, out)
        if done.returncode != 0:
            line = _error_line(done)
            assert source.refusal and re.search(source.refusal, line), f"refused without cause: {line}"
            return
        assert source.says is None or re.search(source.says, done.stdout), done.stdout
        served = None
        if storage == "http" and op == "preprocess":
            served = CountingServer(tmp_path)
            dataset = f"{served.url}/ds.iof"
        else:
            dataset = out
        try:
            manifest = _manifest(dataset)
            rejected = [json.loads(x) for x in _text(dataset, "rejected.jsonl").splitlines() if x.strip()]
            if source.after is not None:
                _check_refused_after(source, local_out, engine)
                return
            load = _load_captions if kind == "captions" else _load
            delivered, skipped = load(dataset, tmp_path / "cache", engine)
        finally:
            if served is not None:
                served.close()
    finally:
        if server is not None:
            server.close()
    _check_accounting(source, manifest, delivered, rejected, skipped)


def _manifest(dataset: str) -> dict:
    return json.loads(_text(dataset, "iofeed.json"))


def _text(dataset: str, name: str) -> str:
    if "://" in dataset:
        return _read(dataset, name)
    path = Path(dataset) / name
    return path.read_text() if path.exists() else ""


def _check_refused_after(source: Source, dataset: Path, engine: str) -> None:
    """The damage done after the run: the loader, in a process of its own, must refuse by name."""
    says = source.after(dataset)
    code = (f"import iofeed\nwith iofeed.loader({str(dataset)!r}, batch_size=4, image_size=32, workers=1, "
            f"output=iofeed.Output(extras=True), engine={engine!r}) as ld:\n    list(ld)")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    try:
        done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env,
                              timeout=RUN_SECONDS)
    except subprocess.TimeoutExpired:
        pytest.fail(f"the loader hung for {RUN_SECONDS} s after {source.damage}")
    assert done.returncode != 0, f"{source.damage}: the loader served the changed dataset"
    assert re.search(says, done.stderr.strip().splitlines()[-1]), done.stderr[-2000:]


def _check_accounting(source: Source, manifest: dict, delivered: dict, rejected: list[dict], skipped: Counter) -> None:
    classes = manifest["classes"]
    twice = {s: n for s, n in delivered.items() if len(n) > 1}
    assert not twice, f"delivered more than once: {twice}"
    by_sample = {i.sample: i for i in source.items}
    wrong = {}
    for sample, [(code, label)] in delivered.items():
        item = by_sample.get(sample)
        assert item is not None, f"sample {sample} arrived, and no such sample was written"
        assert item.expect is not None, f"sample {sample} ({source.damage}) must be rejected, and arrived"
        if source.kind == "captions":  # the caption as written, with the image of its own number
            if label != item.expect:
                wrong[sample] = (item.expect, label)
            continue
        given = classes[label] if 0 <= label < len(classes) else f"label {label}"
        if given != item.expect or source.names[code] != item.expect:
            wrong[sample] = (item.expect, given)
    assert not wrong, f"{len(wrong)} samples with the wrong class (sample: (written, delivered)): {wrong}"
    lost = sorted(set(source.kept()) - set(delivered))
    assert not lost, f"samples lost: {lost} (rejected: {rejected})"
    undelivered = source.written - len(delivered)
    samples = {r["path"] for r in rejected if not any(r["path"].endswith(stray) for stray in source.strays)}
    accounted = len(samples) + sum(skipped.values())  # a sample whose key comes twice may have two lines
    damaged = {source.shards[1].name} if source.lenient else set()  # cut: the samples after the cut are gone
    shard_named = any(r["path"].split("#")[0].endswith(tuple(damaged)) for r in rejected) if damaged else False
    assert accounted == undelivered or (shard_named and accounted <= undelivered), (
        f"{source.written} written, {len(delivered)} kept, {len(rejected)} rejected, {sum(skipped.values())} "
        f"skipped: {undelivered - accounted} lost without a word (rejected: {rejected})")
    if source.refusal:
        assert any(re.search(source.refusal, f"{r['path']} {r['reason']}") for r in rejected), rejected
