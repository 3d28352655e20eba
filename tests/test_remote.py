"""Datasets in object storage: moto's S3 server and an HTTP server on 127.0.0.1, a node-local cache."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

import iofeed
from iofeed.cli.main import main
from iofeed.errors import OptionError, SampleError, SourceError
from iofeed.format.manifest import Manifest
from iofeed.prepare.upload import upload_dataset
from iofeed.sources.remote.cache_dir import cache_usage
from iofeed.sources.samples import open_source

pytest.importorskip("s3fs")
pytest.importorskip("moto.server")
pytest.importorskip("aiohttp")

from helpers.storage import CountingServer, free_port, make_tiny_dataset, moto_s3  # noqa: E402

pytestmark = pytest.mark.storage
# Credentials for moto, set at collection: worker processes come from a fork server that may start
# before the fixtures run, and must see them too (the endpoint travels with the opened dataset).
for _name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):
    os.environ.setdefault(_name, "testing")
os.environ.setdefault("AWS_DEFAULT_REGION", "us-east-1")
BUCKET = "iofeed-test"
KW = dict(batch_size=16, image_size=32, engine="workers", workers=1)


@pytest.fixture(scope="module")
def dataset(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_tiny_dataset(tmp_path_factory.mktemp("remote"))


@pytest.fixture(scope="module")
def s3(dataset: Path):
    """moto's S3 on a loopback port, the AWS variables pointing at it, the tiny dataset uploaded."""
    port = free_port()
    env = pytest.MonkeyPatch()
    env.setenv("AWS_ENDPOINT_URL", f"http://127.0.0.1:{port}")
    with moto_s3(port) as server:
        import fsspec

        fs = fsspec.filesystem("s3", endpoint_url=f"http://127.0.0.1:{port}", skip_instance_cache=True)
        fs.mkdir(BUCKET)
        url = f"s3://{BUCKET}/tiny.iof"
        upload_dataset(dataset, url)
        state = SimpleNamespace(url=url, port=port, fs=fs, server=server)
        yield state
        state.server.stop()
    env.undo()


def _epoch(loader) -> list[np.ndarray]:
    return [loader.last_indices.copy() for _ in loader]


def _shards(dataset: Path) -> list[dict]:
    return Manifest.read(dataset).splits["train"].shards


def test_cli_uploads_and_inspects(s3, dataset: Path, capsys) -> None:
    src = dataset.parent / "tiny"
    url = f"s3://{BUCKET}/cli.iof"
    args = ["preprocess", str(src), "-o", url, "--size", "32", "--shard-mb", "0.0625", "--workers", "1"]
    assert main(args) == 0
    names = {Path(p).name for p in s3.fs.find(f"{BUCKET}/cli.iof")}
    assert {"iofeed.json", "train-samples.npy", "train-000000.tar"} <= names
    remote = json.loads(s3.fs.cat_file(f"{BUCKET}/cli.iof/iofeed.json"))
    assert all(len(s["sha256"]) == 64 for s in remote["splits"]["train"]["shards"])
    assert main(args) == 1 and "already exists" in capsys.readouterr().err
    assert main([*args, "--overwrite"]) == 0
    assert main(["inspect", url]) == 0 and "samples in" in capsys.readouterr().out


def test_overwrite_keeps_a_users_objects_under_the_dataset_url(s3, dataset: Path, capsys) -> None:
    """--overwrite deletes the objects the old manifest lists, nothing else: a user's object named
    like a shard refuses it, naming the object, which keeps its bytes."""
    url = f"s3://{BUCKET}/kept.iof"
    upload_dataset(dataset, url)
    s3.fs.pipe_file(f"{BUCKET}/kept.iof/backup-000001.tar", b"my backup")
    with pytest.raises(OptionError, match="backup-000001.tar.*iofeed did not write"):
        upload_dataset(dataset, url, overwrite=True)
    assert s3.fs.cat_file(f"{BUCKET}/kept.iof/backup-000001.tar") == b"my backup"
    assert s3.fs.exists(f"{BUCKET}/kept.iof/iofeed.json")
    s3.fs.rm_file(f"{BUCKET}/kept.iof/backup-000001.tar")
    upload_dataset(dataset, url, overwrite=True)
    assert len(open_source(url)) == len(open_source(dataset))


def test_an_interrupted_upload_never_looks_complete(s3, dataset: Path) -> None:
    url = f"s3://{BUCKET}/interrupted.iof"
    uploaded = []

    def interrupt(name: str, size: int) -> None:
        uploaded.append(name)
        if len(uploaded) == 3:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        upload_dataset(dataset, url, on_file=interrupt)
    assert s3.fs.exists(f"{BUCKET}/interrupted.iof/{uploaded[0]}")
    assert not s3.fs.exists(f"{BUCKET}/interrupted.iof/iofeed.json")
    with pytest.raises(SourceError, match="no iofeed.json"):
        open_source(url)
    with pytest.raises(OptionError, match="interrupted upload"):
        upload_dataset(dataset, url)
    upload_dataset(dataset, url, overwrite=True)
    assert len(open_source(url)) == len(open_source(dataset))


def test_loader_reads_exactly_the_local_samples(s3, dataset: Path, tmp_path: Path) -> None:
    options = dict(KW, shuffle="block", order=iofeed.Order(block_shards=4), seed=3, workers=2)
    seen = []
    with iofeed.loader(s3.url, cache=iofeed.Cache(dir=tmp_path / "cache"), **options) as remote, \
            iofeed.loader(str(dataset), **options) as local:
        assert len(remote) == len(local)
        for (r_images, r_labels), (l_images, l_labels) in zip(remote, local):
            assert np.array_equal(remote.last_indices, local.last_indices)
            assert np.array_equal(r_labels, l_labels) and np.array_equal(r_images, l_images)
            seen.extend(remote.last_indices.tolist())
    assert sorted(seen) == list(range(len(local.source)))
    shards = _shards(dataset)
    assert remote.stats.fetched["shards"] == len(shards)
    assert remote.stats.fetched["bytes"] == sum(s["bytes"] for s in shards)


def test_resume_mid_epoch_yields_exactly_the_rest(s3, tmp_path: Path) -> None:
    options = dict(KW, cache=iofeed.Cache(dir=tmp_path / "cache"), seed=5)
    with iofeed.loader(s3.url, **options) as whole:
        full = _epoch(whole)
    with iofeed.loader(s3.url, **options) as first:
        stream = iter(first)
        head = []
        for _ in range(3):
            next(stream)
            head.append(first.last_indices.copy())
        state = first.state_dict()
    with iofeed.loader(s3.url, **options) as second:
        second.load_state_dict(state)
        rest = _epoch(second)
    assert state["shuffle"] == "block"
    assert [b.tolist() for b in head + rest] == [b.tolist() for b in full]


@pytest.mark.slow
@pytest.mark.parametrize("shuffle", ["block", "global"])
def test_streamed_stop_at_4_ranks_resumes_at_2_3_8_and_another_batch_size(s3, dataset: Path, tmp_path: Path,
                                                                          shuffle: str) -> None:
    """Over S3: 4 ranks stop after 3 batches of 16; 2, 3 (batches of 12) and 8 ranks take the rest,
    every sample once but the padding. The state names the data, not where it lives: a local
    copy's agrees."""
    options = dict(KW, cache=iofeed.Cache(dir=tmp_path / "cache"), seed=2, drop_last=False, shuffle=shuffle)
    before, states = [], []
    for rank in range(4):
        with iofeed.loader(s3.url, placement=iofeed.Placement(rank=rank, world_size=4), **options) as ld:
            stream = iter(ld)
            for _ in range(3):
                next(stream)
                before += ld.last_indices.tolist()
            states.append(ld.state_dict())
    assert all(s == states[0] for s in states) and states[0]["shuffle"] == shuffle
    total = len(open_source(dataset))
    for world, batch in [(2, 16), (3, 12), (8, 16)]:
        after, counts = [], []
        for rank in range(world):
            with iofeed.loader(s3.url, placement=iofeed.Placement(rank=rank, world_size=world),
                               **{**options, "batch_size": batch}) as ld:
                ld.load_state_dict(states[0])
                mine = [i for _ in ld for i in ld.last_indices.tolist()]
                counts.append(len(mine))
                after += mine
        assert len(set(counts)) == 1, f"{world}x{batch}: equal shares"
        assert sorted(set(before + after)) == list(range(total)), f"{world}x{batch}: every sample"
        assert len(before) + len(after) - total == -(total - 4 * 3 * 16) % world, "only the padding repeats"
    with iofeed.loader(str(dataset), **options) as local:
        local.load_state_dict(states[0])
        assert local.state_dict() == states[0]


def test_a_tenth_of_the_dataset_bounds_the_cache(s3, dataset: Path, tmp_path: Path) -> None:
    shards = _shards(dataset)
    limit = sum(s["bytes"] for s in shards) // 10
    assert limit >= 2 * max(s["bytes"] for s in shards), "the tiny dataset needs >= 20 shards for this test"
    cache = tmp_path / "cache"
    seen, peak, done = [], [0], threading.Event()

    def watch() -> None:
        while not done.wait(0.005):
            peak[0] = max(peak[0], cache_usage(cache))

    watcher = threading.Thread(target=watch)
    watcher.start()
    options = dict(KW, batch_size=8,
                   resources=iofeed.Resources(prefetch=2))  # the workers' lookahead stays within a block of one shard
    try:
        with iofeed.loader(s3.url, cache=iofeed.Cache(dir=cache, limit=limit), order=iofeed.Order(block_shards=1),
                           **options) as loader:
            for _ in loader:
                seen.extend(loader.last_indices.tolist())
    finally:
        done.set()
        watcher.join()
    assert not loader.stats.skipped, loader.stats.skipped_examples
    assert 0 < peak[0] <= limit
    assert sorted(seen) == list(range(len(loader.source)))
    # Each shard fetched once in the pass (none evicted early): the first len(shards) downloads are
    # every shard. As the pass ends the prefetcher may fetch the next epoch's first batches' shards
    # again (evicted by then), whether it gets there before the loop closes is scheduling: at most
    # the 2 shards that `prefetch=2` batches of 8 span.
    remote = loader.source.remote
    urls = [record["url"] for record in remote.cache.fetches_since(remote.log_start)]
    assert len(set(urls[:len(shards)])) == len(shards) == len({s["name"] for s in shards})
    assert len(shards) <= loader.stats.fetched["shards"] == len(urls) <= len(shards) + 2
    with pytest.raises(OptionError, match=r"Cache\.limit"):
        iofeed.loader(s3.url, cache=iofeed.Cache(dir=cache, limit=limit), order=iofeed.Order(block_shards=8), **KW)


def test_the_prefetcher_takes_the_next_epochs_early_shards_after_the_passs() -> None:
    """The workers start the next epoch's first batches while an epoch ends: after every shard of
    the pass, the prefetcher fetches those batches' shards (asking the engine how many once it gets
    there) and keeps them pinned until the pass ends, so that no worker stops to download one.
    (Over HTTP, `scripts/streamed_boundary.py` counts the workers' downloads: 8-10 per run before,
    none after; whether a worker or a download thread reaches a shard first is scheduling, so a
    test on real servers cannot assert none.)"""
    from iofeed.sources.remote.prefetch import Prefetcher

    acquired, lock = [], threading.Lock()

    def acquire(file_id: int, cancel: object = None) -> int:
        with lock:
            acquired.append(file_id)
        return os.open(os.devnull, os.O_RDONLY)

    remote = SimpleNamespace(acquire=acquire, refs=[SimpleNamespace(bytes=10)] * 6, cache=SimpleNamespace(limit=1000))
    shard_of = np.repeat(np.arange(6), 4)  # 4 samples per shard
    batches = [np.arange(0, 8), np.arange(8, 16)]  # shards 0 and 1, then 2 and 3
    following = [np.arange(20, 24), np.arange(0, 4), np.arange(16, 20)]  # shards 5, 0, 4
    asked: list[int] = []
    prefetcher = Prefetcher(remote, shard_of, batches, 0, lambda: asked.append(1) or following[:2])
    try:
        deadline = time.monotonic() + 120  # a hang guard
        while len(acquired) < 5 or None in prefetcher._pins.values():
            assert time.monotonic() < deadline, acquired
            time.sleep(0.01)
        prefetcher.advance(len(batches))  # the consumer is past every batch of the pass
        pinned = sorted(prefetcher._pins)
    finally:
        prefetcher.close()
    assert sorted(acquired) == [0, 1, 2, 3, 5], "the pass's shards and the early batches' (shard 0 not again)"
    assert asked == [1], "the engine is asked once"
    assert pinned == [0, 5], "the early batches' shards stay pinned (shard 0 kept), the pass's others end"
    assert prefetcher._pins == {}


def test_a_pass_with_nothing_left_fetches_nothing(dataset: Path, tmp_path: Path) -> None:
    """Resumed at the end of an epoch, a pass yields nothing and starts nothing of the next epoch:
    its prefetcher must not download that epoch's first shards either."""
    server = CountingServer(dataset.parent)
    try:
        with iofeed.loader(f"{server.url}/{dataset.name}", cache=iofeed.Cache(dir=tmp_path / "cache"), **KW) as loader:
            loader.load_state_dict({**loader.state_dict(), "samples_done": len(loader.source),
                                    "batches_done": len(loader)})
            assert _epoch(loader) == [] and loader.epoch == 1
            time.sleep(0.5)  # a download started by the pass would have asked by now
    finally:
        server.close()
    assert not [path for path in server.gets if path.endswith(".tar")]


def test_a_newer_iteration_ends_the_pins_of_a_suspended_one(dataset: Path, tmp_path: Path) -> None:
    """An iteration left suspended (an older tf iterator, Lightning's after len() batches) is not
    collected at once: the newer iteration ends its downloads and pins, which otherwise hold cache
    room (and descriptors) until then."""
    shards, cache = _shards(dataset), tmp_path / "cache"

    def pins() -> int:
        """This process's descriptors of cached shards, once the downloads have settled."""
        counts, deadline = [], time.monotonic() + 120  # a hang guard
        while len(counts) < 5 or len(set(counts[-5:])) > 1:
            assert time.monotonic() < deadline, counts[-5:]
            time.sleep(0.1)
            fds = os.listdir("/proc/self/fd")
            counts.append(sum(str(cache) in os.path.realpath(f"/proc/self/fd/{fd}") for fd in fds))
        return counts[-1]

    server = CountingServer(dataset.parent)
    try:
        with iofeed.loader(f"{server.url}/{dataset.name}", cache=iofeed.Cache(dir=cache), **KW) as loader:
            older = iter(loader)
            next(older)
            alone = pins()
            newer = iter(loader)
            next(newer)  # takes over; `older` stays suspended, and referenced
            both = pins()
            del older, newer
    finally:
        server.close()
    assert 0 < alone <= len(shards) and both <= alone
    assert pins() == 0, "closing the loader ends every pin"


def test_the_epoch_completes_when_the_server_restarts(s3, dataset: Path, tmp_path: Path) -> None:
    limit = sum(s["bytes"] for s in _shards(dataset)) // 10
    seen = []
    with iofeed.loader(s3.url, cache=iofeed.Cache(dir=tmp_path / "cache", limit=limit),
                       order=iofeed.Order(block_shards=1), **KW) as loader:
        stream = iter(loader)
        for _ in range(3):
            next(stream)
            seen.extend(loader.last_indices.tolist())
        s3.server.stop()
        down_at = time.monotonic()

        def restart() -> None:
            time.sleep(2.0)
            from moto.server import ThreadedMotoServer

            s3.server = ThreadedMotoServer(ip_address="127.0.0.1", port=s3.port, verbose=False)
            s3.server.start()

        threading.Thread(target=restart, daemon=True).start()
        for _ in stream:
            seen.extend(loader.last_indices.tolist())
    assert time.monotonic() - down_at >= 2.0  # it did wait for the server
    assert not loader.stats.skipped, loader.stats.skipped_examples
    assert sorted(seen) == list(range(len(loader.source)))


def _broken_copy(s3, dataset: Path, kind: str) -> tuple[str, int]:
    """The dataset uploaded under a new name with shard 3 deleted or truncated; (URL, its samples)."""
    url = f"s3://{BUCKET}/{kind}.iof"
    if not s3.fs.exists(f"{BUCKET}/{kind}.iof/iofeed.json"):
        upload_dataset(dataset, url)
        key = f"{BUCKET}/{kind}.iof/train-000003.tar"
        if kind == "deleted":
            s3.fs.rm_file(key)
        else:
            s3.fs.pipe_file(key, s3.fs.cat_file(key)[:10_000])
    return url, _shards(dataset)[3]["samples"]


@pytest.mark.parametrize("kind, says", [("deleted", "not found"), ("truncated", "truncated")])
def test_a_broken_shard_raises_naming_its_url(s3, dataset: Path, tmp_path: Path, kind: str, says: str) -> None:
    url, _ = _broken_copy(s3, dataset, kind)
    with iofeed.loader(url, cache=iofeed.Cache(dir=tmp_path / "cache"), skips=iofeed.Skips(on_error="raise"),
                       shuffle="none", **KW) as loader:
        with pytest.raises(SampleError, match=f"{url}/train-000003.tar: [^)]*{says}"):
            _epoch(loader)


@pytest.mark.parametrize("kind", ["deleted", "truncated"])
def test_a_broken_shard_is_skipped_and_counted(s3, dataset: Path, tmp_path: Path, kind: str) -> None:
    url, lost = _broken_copy(s3, dataset, kind)
    with iofeed.loader(url, cache=iofeed.Cache(dir=tmp_path / "cache"), skips=iofeed.Skips(on_error="skip"),
                       **KW) as loader:
        delivered = sum(len(b) for b in _epoch(loader))
    assert loader.stats.skipped == {"shard could not be fetched": lost}
    assert delivered == len(loader.source) - lost + loader.stats.refilled, "spares in the places they could take"
    assert any("train-000003.tar" in line for line in loader.stats.skipped_examples)


RANK_SCRIPT = """
import json, sys, iofeed
with iofeed.loader(sys.argv[1], batch_size=16, image_size=32, engine="workers", workers=1,
                   placement=iofeed.Placement(rank=int(sys.argv[2]), world_size=2), drop_last=False,
                   cache=iofeed.Cache(dir=sys.argv[3])) as loader:
    seen = [i for _ in loader for i in loader.last_indices.tolist()]
print(json.dumps({"seen": seen, "skipped": loader.stats.skipped_examples}))
"""


def test_two_ranks_of_a_node_fetch_each_shard_once(dataset: Path, tmp_path: Path) -> None:
    server = CountingServer(dataset.parent)
    try:
        url = f"{server.url}/{dataset.name}"
        ranks = [subprocess.Popen([sys.executable, "-c", RANK_SCRIPT, url, str(rank), str(tmp_path / "cache")],
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for rank in (0, 1)]
        outputs = [rank.communicate(timeout=180) for rank in ranks]
    finally:
        server.close()
    assert all(rank.returncode == 0 for rank in ranks), [err[-2000:] for _, err in outputs]
    results = [json.loads(out) for out, _ in outputs]
    assert not any(r["skipped"] for r in results), results
    seen = [set(r["seen"]) for r in results]
    assert seen[0] | seen[1] == set(range(len(open_source(dataset))))
    tars = {path: count for path, count in server.gets.items() if path.endswith(".tar")}
    assert len(tars) == len(_shards(dataset)) and set(tars.values()) == {1}, tars


def test_a_dataset_without_checksums_reads_by_size(dataset: Path, tmp_path: Path) -> None:
    old = tmp_path / "old.iof"
    old.mkdir()
    for path in dataset.iterdir():
        (old / path.name).symlink_to(path)
    manifest = json.loads((dataset / "iofeed.json").read_text())
    for split in manifest["splits"].values():
        for shard in split["shards"]:
            del shard["sha256"]
    (old / "iofeed.json").unlink()
    (old / "iofeed.json").write_text(json.dumps(manifest))
    server = CountingServer(tmp_path)
    try:
        with iofeed.loader(f"{server.url}/old.iof", cache=iofeed.Cache(dir=tmp_path / "cache"), **KW) as loader:
            delivered = sum(len(b) for b in _epoch(loader))
    finally:
        server.close()
    assert not loader.stats.skipped, loader.stats.skipped_examples
    assert delivered == len(loader.source)
    assert all("~size" in p.name for p in (tmp_path / "cache").rglob("*.tar~*") if ".lock" not in p.name)


def test_bad_urls_say_what_to_do(tmp_path: Path) -> None:
    with pytest.raises(OptionError, match="unsupported dataset URL"):
        open_source("ftp://example.invalid/x.iof")
    (tmp_path / "iofeed.json").write_text("{}")
    with pytest.raises(OptionError, match="read-only"):
        upload_dataset(tmp_path, "http://127.0.0.1:9/x.iof")


def test_bench_streams_beside_local_disk(dataset: Path, tmp_path: Path, capsys, monkeypatch) -> None:
    """The streaming feeds cache into a folder of the bench's own, removed at the end: each run
    used to leave a `bench-warm-*` folder of up to 507 MB in the user's ~/.cache/iofeed."""
    pytest.importorskip("torch")
    from test_bench import _bench

    monkeypatch.setenv("IOFEED_CACHE", str(tmp_path / "user-cache"))
    dead = subprocess.Popen(["true"])
    dead.wait()
    killed = tmp_path / "res" / f".iofeed-bench-cache-{dead.pid}-x1" / "warm-y"  # a bench SIGKILLed mid-run
    killed.mkdir(parents=True)
    (killed / "shard.tar~0123456789abcdef").write_bytes(b"x" * 100)
    feeds = "iofeed-dataset,iofeed-s3-cold,iofeed-s3-warm"
    record = _bench(tmp_path, capsys, str(dataset), "--feeds", feeds, "--seconds", "1", "--workers", "1")
    assert [f["name"] for f in record["feeds"]] == feeds.split(",")
    assert os.environ.get("AWS_ACCESS_KEY_ID") != "iofeed-bench"  # the bench put the variables back
    assert not (tmp_path / "user-cache").exists() or not list((tmp_path / "user-cache").iterdir())
    assert sorted(p.name for p in (tmp_path / "res").iterdir()) == ["bench.json", "bench.png"]


def test_a_failed_bench_removes_its_streaming_cache_too(dataset: Path, tmp_path: Path, capsys, monkeypatch) -> None:
    """A bench that fails once the streaming feeds have fetched shards leaves no cache folder behind."""
    pytest.importorskip("torch")
    from contextlib import ExitStack

    import iofeed.cli.bench.run as bench_run
    from iofeed.cli.bench.sources import SOURCES

    made: list[Path] = []

    def failing_measure(runs, *args, **kwargs):
        for run in runs:  # each streaming feed's cache, made as its feed makes it, never removed by the feed
            if SOURCES[run.spec.entry.source].served:
                made.append(Path(SOURCES[run.spec.entry.source].make(run.spec, ExitStack())[1]["cache"].dir))
        if not any(made[-1].rglob("*.tar~*")):  # the warm feed's, fetched before it starts
            raise RuntimeError("nothing fetched")
        raise RuntimeError("a feed crashed")

    monkeypatch.setenv("IOFEED_CACHE", str(tmp_path / "user-cache"))
    monkeypatch.setattr(bench_run, "measure", failing_measure)
    with pytest.raises(RuntimeError, match="a feed crashed"):
        main(["bench", str(dataset), "--feeds", "iofeed-s3-cold,iofeed-s3-warm", "--seconds", "1",
              "--workers", "1", "--json", str(tmp_path / "res" / "bench.json")])
    assert len(made) == 2 and not any(folder.exists() for folder in made)
    assert list((tmp_path / "res").iterdir()) == []
    assert not (tmp_path / "user-cache").exists() or not list((tmp_path / "user-cache").iterdir())


def test_the_cold_feed_refuses_a_split_its_cache_would_hold(s3, dataset: Path, tmp_path: Path, monkeypatch) -> None:
    """The bench's cold feed must evict: with the default 128 MiB shards (Caltech-256: 4 shards) its
    cache of 6 shards holds the whole split, so it is reported unavailable, naming the fix."""
    from iofeed.cli.bench.stream import stream_options
    from iofeed.errors import FeedUnavailable
    from iofeed.prepare.run import preprocess

    (tmp_path / "cache").mkdir()
    one_shard = tmp_path / "one-shard.iof"
    preprocess(dataset.parent / "tiny", one_shard, shard_bytes=1 << 30, workers=1, progress=False)
    url = f"s3://{BUCKET}/one-shard.iof"
    upload_dataset(one_shard, url)
    with pytest.raises(FeedUnavailable,
                       match=r"cache that streams holds 6 shards .*whole split is 1 shard \(.*--shard-mb 4"):
        stream_options(url, "cold", tmp_path / "cache")
    cold = stream_options(s3.url, "cold", tmp_path / "cache")  # ~30 shards of 64 KiB: 6 are a fifth of the split
    assert cold["cache"].limit < sum(s["bytes"] for s in _shards(dataset))
    assert list((tmp_path / "cache").iterdir()) == [Path(cold["cache"].dir)], "the refused feed's folder is removed"


@pytest.mark.dali
def test_the_dali_engine_reads_the_same_stream(dataset: Path, tmp_path: Path) -> None:
    pytest.importorskip("nvidia.dali")
    server = CountingServer(dataset.parent)
    options = dict(batch_size=16, image_size=32, workers=1, augment=False, seed=2)
    try:
        with iofeed.loader(f"{server.url}/{dataset.name}", engine="dali", cache=iofeed.Cache(dir=tmp_path / "cache"),
                           **options) as remote, iofeed.loader(str(dataset), engine="dali", shuffle="block",
                                                               **options) as local:
            for (_, r_labels), (_, l_labels) in zip(remote, local):
                assert np.array_equal(remote.last_indices, local.last_indices)
                assert np.array_equal(r_labels, l_labels)
            assert remote.stats.images == local.stats.images == len(local) * 16
    finally:
        server.close()
    assert remote.stats.fetched["shards"] == len(_shards(dataset))


FETCH_SCRIPT = """
import sys
from pathlib import Path
from iofeed.sources.remote.cache import ShardCache, ShardRef
cache = ShardCache(Path(sys.argv[1]), sys.argv[2], 1 << 30)
cache.acquire(ShardRef(sys.argv[3], int(sys.argv[4]), sys.argv[5]))
"""


def test_a_rank_killed_mid_download_leaves_nothing_trusted(dataset: Path, tmp_path: Path) -> None:
    from iofeed.sources.remote.cache import ShardCache, ShardRef

    shard = _shards(dataset)[0]
    server = CountingServer(dataset.parent)
    url = f"{server.url}/{dataset.name}"
    ref = ShardRef(f"{url}/{shard['name']}", shard["bytes"], shard["sha256"])
    server.stall.add(f"/{dataset.name}/{shard['name']}")
    cache_dir = tmp_path / "cache"
    try:
        rank = subprocess.Popen([sys.executable, "-c", FETCH_SCRIPT, str(cache_dir), url, ref.url,
                                 str(ref.bytes), ref.sha256])
        deadline = time.monotonic() + 60
        path = f"/{dataset.name}/{shard['name']}"
        while not (server.gets[path] and list(cache_dir.rglob("*.part-*"))) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert server.gets[path] == 1 and list(cache_dir.rglob("*.part-*")), "the download never started"
        time.sleep(0.5)  # half the shard is on its way
        rank.kill()  # mid-download: it holds the shard's lock and a half-written part file
        rank.wait(timeout=120)
        server.stall.clear()
        cache = ShardCache(cache_dir, url, 1 << 30)
        fd = cache.acquire(ref)  # the lock died with the rank; the part file is not taken for the shard
        try:
            data = os.pread(fd, ref.bytes + 1, 0)
        finally:
            os.close(fd)
    finally:
        server.close()
    assert data == (dataset / shard["name"]).read_bytes()
    assert not list(cache_dir.rglob("*.part-*"))
    assert server.gets[f"/{dataset.name}/{shard['name']}"] == 2


def test_a_download_becomes_its_shard_under_the_eviction_lock(dataset: Path, tmp_path: Path, monkeypatch) -> None:
    """Scans for room run under the node's eviction lock; a part file renamed to its shard's name
    outside it could be missed by a scan (listed under neither name), which then evicted too little:
    the cache reached 1.04x its limit with two workers streaming the stand-in."""
    import fcntl

    from iofeed.sources.remote.cache import ShardCache, ShardRef
    from iofeed.sources.remote.cache_dir import EVICT_LOCK

    shard = _shards(dataset)[0]
    server = CountingServer(dataset.parent)
    url = f"{server.url}/{dataset.name}"
    cache = ShardCache(tmp_path / "cache", url, 1 << 30)
    renames_unlocked, real_replace = [], os.replace

    def replace(src, dst) -> None:
        if ".part-" in str(src):
            fd = os.open(cache.root / EVICT_LOCK, os.O_RDWR)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                renames_unlocked.append(str(dst))
            except BlockingIOError:
                pass  # held, as it must be
            finally:
                os.close(fd)
        real_replace(src, dst)

    monkeypatch.setattr(os, "replace", replace)
    try:
        os.close(cache.acquire(ShardRef(f"{url}/{shard['name']}", shard["bytes"], shard["sha256"])))
    finally:
        server.close()
    assert server.gets[f"/{dataset.name}/{shard['name']}"] == 1
    assert renames_unlocked == []


def test_throttling_and_5xx_are_retried(dataset: Path, tmp_path: Path) -> None:
    server = CountingServer(dataset.parent)
    shards = _shards(dataset)
    for shard in shards[:3]:
        server.throttle[f"/{dataset.name}/{shard['name']}"] = 2
    try:
        with iofeed.loader(f"{server.url}/{dataset.name}", cache=iofeed.Cache(dir=tmp_path / "cache"), **KW) as loader:
            delivered = sum(len(b) for b in _epoch(loader))
    finally:
        server.close()
    assert not loader.stats.skipped and delivered == len(loader) * 16
    assert [server.gets[f"/{dataset.name}/{s['name']}"] for s in shards[:4]] == [3, 3, 3, 1]


def test_which_failures_are_transient() -> None:
    import aiohttp
    import botocore.exceptions

    from iofeed.sources.remote.retry import is_transient

    def response_error(status: int) -> aiohttp.ClientResponseError:
        return aiohttp.ClientResponseError(None, (), status=status)  # type: ignore[arg-type]

    transient = [botocore.exceptions.EndpointConnectionError(endpoint_url="http://x"),
                 botocore.exceptions.ReadTimeoutError(endpoint_url="http://x"), aiohttp.ServerDisconnectedError(),
                 ConnectionResetError(), TimeoutError(), response_error(503), response_error(500),
                 response_error(429), response_error(408)]
    final = [FileNotFoundError("gone"), PermissionError("denied"), response_error(403), response_error(400),
             ValueError("a bug")]
    assert [is_transient(e) for e in transient] == [True] * len(transient)
    assert [is_transient(e) for e in final] == [False] * len(final)


def test_raw_pixels_stream_too(tmp_path: Path) -> None:
    raw = make_tiny_dataset(tmp_path, classes=4, per_class=40, fmt="raw")
    server = CountingServer(tmp_path)
    options = dict(KW, augment=False, shuffle="block", order=iofeed.Order(block_shards=2), seed=1)
    try:
        with iofeed.loader(f"{server.url}/{raw.name}", cache=iofeed.Cache(dir=tmp_path / "cache"),
                           **options) as remote, \
                iofeed.loader(str(raw), **options) as local:
            batches = 0
            for (r_images, r_labels), (l_images, l_labels) in zip(remote, local):
                assert np.array_equal(r_images, l_images) and np.array_equal(r_labels, l_labels)
                batches += 1
    finally:
        server.close()
    assert batches == len(local) > 0 and remote.source.has_raw()
