"""The node cache's folder and limits (issue 29): it touches only files it wrote, in a folder it
marks as its own; its default limit serves a normal disk; the live-shard check counts real
shards; a failure is never inherited by the next epoch; a wrong-size read-only file is not served."""
from __future__ import annotations

import os
import shutil
from collections import namedtuple
from pathlib import Path

import numpy as np
import pytest

import iofeed
from iofeed.errors import OptionError
from iofeed.format.manifest import Manifest
from iofeed.sources.remote.cache import ShardCache, ShardRef
from iofeed.sources.remote.cache_dir import MARKER, cache_usage, claim_cache_dir, resolve_limit
from iofeed.sources.remote.retry import RetryPolicy

pytest.importorskip("aiohttp")

from helpers.images import label_from_pixels, make_colour_tree  # noqa: E402
from helpers.storage import CountingServer  # noqa: E402

pytestmark = pytest.mark.storage
GiB = 1 << 30
Usage = namedtuple("Usage", "total used free")
USER_FILES = {"notes/draft.txt~": b"draft", "notes/report~v2.md": b"report", "notes/run.part-1-1": b"run",
              "notes/deep/old.tar~0123456789abcdef": b"not a shard of iofeed's"}


@pytest.fixture(autouse=True)
def _private_default_cache(tmp_path: Path, monkeypatch) -> None:
    """The default cache folder of these tests: never the user's ~/.cache."""
    monkeypatch.setenv("IOFEED_CACHE", str(tmp_path / "default-cache"))


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory):
    """Four colour classes preprocessed into a few small shards, served over HTTP on 127.0.0.1."""
    from iofeed.prepare.run import preprocess

    root = tmp_path_factory.mktemp("served")
    tree = make_colour_tree(root / "tree", per_class=6)
    preprocess(tree, root / "colour.iof", val_per_class=1, shard_bytes=1 << 16, progress=False, workers=1)
    server = CountingServer(root)
    yield server, root / "colour.iof"
    server.close()


def _url(served) -> str:
    server, dataset = served
    return f"{server.url}/{dataset.name}"


def _labels_from_pixels(loader) -> tuple[list[int], list[int]]:
    delivered, seen = [], []
    for images, labels in loader:
        delivered += [int(x) for x in labels]
        seen += [label_from_pixels(np.asarray(image)) for image in images]
    return delivered, seen


# --- item 1: the cache deletes only what it wrote ------------------------------------------

def test_eviction_never_touches_the_users_files_in_the_cache_folder(served, tmp_path: Path) -> None:
    """Eviction removed any file with `~` or `.part-` in its name in any subfolder of cache_dir:
    a `notes/` folder with `draft.txt~`, `report~v2.md` and `run.part-1-1` was emptied."""
    cache_dir = tmp_path / "cache"
    with iofeed.loader(_url(served), cache=iofeed.Cache(dir=cache_dir), batch_size=4, image_size=32,
                       workers=1) as loader:
        next(iter(loader))  # the cache folder is made, marked and used
    folders = [cache_dir, *(p for p in cache_dir.iterdir() if p.is_dir())]
    assert len(folders) == 2 and len(folders[1].name) == 16, folders
    for shard in folders[1].glob("*.tar~*[0-9a-f]"):  # fetched again below, under a limit: evictions
        shard.unlink()
    for name, data in USER_FILES.items():  # the user then keeps notes there, some in a dataset folder
        for folder in folders:
            (folder / name).parent.mkdir(parents=True, exist_ok=True)
            (folder / name).write_bytes(data)
            os.utime(folder / name, (1, 1))  # older than any shard: first in line for an LRU eviction
    largest = max(s["bytes"] for s in Manifest.read(served[1]).splits["train"].shards)
    with iofeed.loader(_url(served), cache=iofeed.Cache(dir=cache_dir, limit=3 * largest), shuffle="none",
                       batch_size=4, image_size=32, workers=1) as loader:  # evicts all epoch long
        delivered, seen = _labels_from_pixels(loader)
    assert delivered == seen and len(delivered) == len(loader.source)
    assert loader.stats.fetched["shards"] >= len(loader.source.files) >= 4, "every shard fetched, 3 fit"
    for name, data in USER_FILES.items():
        for folder in folders:
            assert (folder / name).read_bytes() == data, f"{folder / name} was changed or removed"


def test_a_non_empty_folder_that_is_not_an_iofeed_cache_is_refused(served, tmp_path: Path) -> None:
    mine = tmp_path / "projects"
    for name, data in USER_FILES.items():
        (mine / name).parent.mkdir(parents=True, exist_ok=True)
        (mine / name).write_bytes(data)
    with pytest.raises(OptionError) as refused:
        iofeed.loader(_url(served), cache=iofeed.Cache(dir=mine), batch_size=4, image_size=32, workers=1)
    message = str(refused.value)
    assert "\n" not in message and str(mine) in message and "not an iofeed cache" in message
    assert "pass cache=iofeed.Cache(dir=<a new or empty folder>)" in message
    assert sorted(p.relative_to(mine).as_posix() for p in mine.rglob("*") if p.is_file()) == sorted(USER_FILES)


def test_an_empty_folder_is_marked_and_an_old_iofeed_cache_is_adopted(tmp_path: Path) -> None:
    assert (claim_cache_dir(tmp_path / "new") / MARKER).read_text().startswith("Signature: 8a477f597d28d172")
    old = tmp_path / "old"  # what iofeed wrote before the marker existed
    (old / "0123456789abcdef").mkdir(parents=True)
    (old / ".evict.lock").write_bytes(b"")
    (old / "0123456789abcdef" / "shard-000000.tar~fedcba9876543210").write_bytes(b"x" * 10)
    (old / "0123456789abcdef" / "fetches.jsonl").write_bytes(b"")
    assert claim_cache_dir(old) == old and (old / MARKER).is_file()
    assert cache_usage(old) == 10
    racing = tmp_path / "racing"  # another rank of the node is marking it at this moment
    racing.mkdir()
    (racing / f"{MARKER}.4242-1").write_text("Signature: 8a4")
    assert claim_cache_dir(racing) == racing and "iofeed" in (racing / MARKER).read_text()


def test_an_empty_cache_dir_is_refused_not_the_working_directory(served, tmp_path: Path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    with pytest.raises(OptionError, match=r"Cache\.dir='' names no folder .*pass cache=iofeed\.Cache\(dir=<a folder"):
        iofeed.loader(_url(served), cache=iofeed.Cache(dir=""), batch_size=4, image_size=32, workers=1)
    assert list(tmp_path.iterdir()) == [], "nothing written in the working directory"


# --- item 2: the default limit serves a normal disk ----------------------------------------

def test_the_default_limit_keeps_an_absolute_reserve_not_a_share_of_the_disk(tmp_path: Path) -> None:
    """"Free disk above a 10% reserve" was 1 byte on a 252 GiB disk with 20-27 GiB free."""
    root = claim_cache_dir(tmp_path / "cache")
    big = resolve_limit(root, None, lambda _: Usage(252 * GiB, 230 * GiB, 22 * GiB))
    assert big == 20 * GiB, "22 GiB free, 2 GiB kept"
    huge = resolve_limit(root, None, lambda _: Usage(8000 * GiB, 4000 * GiB, 4000 * GiB))
    assert huge == 3800 * GiB, "a 5% share of the free disk kept once it is over 2 GiB"
    assert resolve_limit(root, None, lambda _: Usage(64 * GiB, 63 * GiB, GiB)) == 1, "below the reserve"
    (root / "0123456789abcdef").mkdir()
    (root / "0123456789abcdef" / "a.tar~0123456789abcdef").write_bytes(b"x" * 1000)
    assert resolve_limit(root, None, lambda _: Usage(64 * GiB, 60 * GiB, 4 * GiB)) == 2 * GiB + 1000
    assert resolve_limit(root, 12345, lambda _: Usage(1, 1, 0)) == 12345, "a given limit is kept"


# --- item 5: the live-shard check counts the shards there are -------------------------------

def test_a_limit_holding_the_whole_split_is_enough_for_any_block_size(served, tmp_path: Path) -> None:
    """3 shards and block_shards=8: the limit had to hold 16 shards that do not exist."""
    shards = Manifest.read(served[1]).splits["train"].shards
    assert 1 < len(shards) < 16
    total = sum(s["bytes"] for s in shards)
    with iofeed.loader(_url(served), cache=iofeed.Cache(dir=tmp_path / "cache", limit=total),
                       order=iofeed.Order(block_shards=8),
                       batch_size=4, image_size=32, workers=1) as loader:
        delivered, seen = _labels_from_pixels(loader)
        again, _ = _labels_from_pixels(loader)
    assert delivered == seen and sorted(delivered) == sorted(again) and len(delivered) == len(loader.source)
    assert loader.stats.fetched["shards"] == len(shards), "each shard fetched once, none evicted"
    with pytest.raises(OptionError, match=rf"cannot hold the {len(shards)} shards"):
        iofeed.loader(_url(served), cache=iofeed.Cache(dir=tmp_path / "small", limit=total - 1),
                      order=iofeed.Order(block_shards=8),
                      batch_size=4, image_size=32, workers=1)


# --- item 4: a failure is not inherited by the next epoch -----------------------------------

def test_a_shard_that_failed_in_one_epoch_is_read_in_the_next(served, tmp_path: Path, monkeypatch) -> None:
    """The `.failed` note and each reader's memory lasted the retry budget, so an epoch starting
    within it skipped the shard again although the server was fine: a 403 (final, so epoch 1 ends
    at once) under a 10-minute budget."""
    server, dataset = served
    monkeypatch.setenv("IOFEED_RETRY_SECONDS", "600")
    shard = Manifest.read(dataset).splits["train"].shards[1]
    path = f"/{dataset.name}/{shard['name']}"
    server.fail_status, server.failing[path] = 403, 10**6
    try:
        with iofeed.loader(_url(served), cache=iofeed.Cache(dir=tmp_path / "cache"),
                           skips=iofeed.Skips(on_error="skip", max_skipped=None),
                           batch_size=4, image_size=32, workers=1) as loader:
            first, _ = _labels_from_pixels(loader)
            skipped, refilled = dict(loader.stats.skipped), loader.stats.refilled
            server.failing.clear()
            # The engine begins the next epoch's first batches during this one, while the server still
            # failed: those skips are real. An epoch none of whose batches began before the server
            # came back must read the shard (it did not: the failure was remembered for the budget).
            loader.set_epoch(loader.epoch + 2)
            second, seen = _labels_from_pixels(loader)
    finally:
        server.failing.clear()
        server.fail_status = 500
    # Every sample of the shard is skipped, and a spare drawn from the same shard may be skipped too.
    lost = sum(skipped.values())
    assert set(skipped) == {"shard could not be fetched"} and lost >= shard["samples"], skipped
    assert len(first) == len(loader.source) - lost + refilled, "spares (of other shards) in places"
    assert len(second) == len(loader.source) and second == seen, "nothing skipped in epoch 2"
    assert loader.stats.skipped == skipped


# --- item 7: a read-only cached file of the wrong size is not served ------------------------

def test_a_read_only_cached_file_of_the_wrong_size_is_fetched_again(served, tmp_path: Path) -> None:
    """`shardref.trusted` serves a read-only file without hashing it: its size is the one check left, so a
    read-only file cut short (or grown) under a shard's cached name must not be served."""
    server, dataset = served
    shard = Manifest.read(dataset).splits["train"].shards[0]
    good = (dataset / shard["name"]).read_bytes()
    ref = ShardRef(f"{_url(served)}/{shard['name']}", shard["bytes"], shard["sha256"])
    for wrong in [good[:-512], good + bytes(512)]:
        cache = ShardCache(claim_cache_dir(tmp_path / f"cache{len(wrong)}"), _url(served), 1 << 30,
                           retry=RetryPolicy(budget=5))
        target = cache.path(ref)
        target.parent.mkdir(parents=True)
        target.write_bytes(wrong)
        target.chmod(0o444)  # as a verified download is left
        fd = cache.acquire(ref)
        try:
            assert os.pread(fd, len(good) + 1024, 0) == good
        finally:
            os.close(fd)
        shutil.rmtree(target.parent, ignore_errors=True)
