"""Remote faults and the shard cache under stress: 5xx, refused connections, stalled bodies, full
and read-only disks, killed downloads, tampered cache files (issue 22). Servers on 127.0.0.1 only."""
from __future__ import annotations

import errno
import fcntl
import hashlib
import os
import subprocess
import threading
import time
import warnings
from pathlib import Path

import pytest

import iofeed
from iofeed.cli.main import main
from iofeed.errors import CacheWriteError, FetchError, OptionError, SampleError, SourceError
from iofeed.format.manifest import Manifest
from iofeed.sources.remote.cache import FAILED, PART, ShardCache, ShardRef
from iofeed.sources.remote.retry import RetryPolicy, describe, with_retries
from iofeed.sources.samples import open_source

pytest.importorskip("aiohttp")
pytest.importorskip("s3fs")

from helpers.storage import CountingServer, FaultProxy, free_port, make_tiny_dataset, moto_s3  # noqa: E402

pytestmark = pytest.mark.storage
# Retries bounded by their count, never by a short time budget: on a loaded machine one healthy
# attempt can take longer than a second, and a 1.5 s budget then failed a read that should pass.
SHORT = RetryPolicy(attempts=5, first_delay=0.05, max_delay=0.2, budget=600, stall_seconds=60)
# For servers that stall on purpose: a short stall deadline, and again the count as the bound.
STALLING = RetryPolicy(attempts=3, first_delay=0.05, max_delay=0.2, budget=600, stall_seconds=0.5)
HANG_GUARD_S = 120  # only a hang takes this long; the bounds themselves are tested on an injected clock
KW = dict(batch_size=16, image_size=32, engine="workers", workers=1)


@pytest.fixture(scope="module")
def dataset(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_tiny_dataset(tmp_path_factory.mktemp("faults"))


@pytest.fixture(autouse=True)
def _private_default_cache(tmp_path: Path, monkeypatch) -> None:
    """The default cache folder of these tests: never the user's ~/.cache."""
    monkeypatch.setenv("IOFEED_CACHE", str(tmp_path / "default-cache"))


@pytest.fixture()
def server(dataset: Path):
    served = CountingServer(dataset.parent)
    yield served
    served.close()


def _shards(dataset: Path) -> list[dict]:
    return Manifest.read(dataset).splits["train"].shards


def _ref(server: CountingServer, dataset: Path, number: int = 0) -> tuple[ShardRef, str]:
    """Shard `number` as a ShardRef on `server`, and its path on the server."""
    shard = _shards(dataset)[number]
    path = f"/{dataset.name}/{shard['name']}"
    return ShardRef(f"{server.url}{path}", shard["bytes"], shard["sha256"]), path


def _cache(server: CountingServer, dataset: Path, root: Path, policy: RetryPolicy = SHORT,
           limit: int = 1 << 30) -> ShardCache:
    return ShardCache(root, f"{server.url}/{dataset.name}", limit, retry=policy)


def _read(cache: ShardCache, ref: ShardRef) -> bytes:
    fd = cache.acquire(ref)
    try:
        return os.pread(fd, ref.bytes + 1, 0)
    finally:
        os.close(fd)


# --- item 1: transient failures are retried in every path, reported truthfully ---------------

def test_a_500_on_head_and_get_is_retried_not_called_not_found(server, dataset: Path, tmp_path: Path) -> None:
    """fsspec turns a failed HEAD+GET into FileNotFoundError: a 500 was "not found", never retried."""
    ref, path = _ref(server, dataset)
    server.failing[path] = 3  # HEAD 500, GET 500 (fsspec's info), then one more
    data = _read(_cache(server, dataset, tmp_path / "cache"), ref)
    assert data == (dataset / _shards(dataset)[0]["name"]).read_bytes()
    assert server.heads[path] + server.gets[path] >= 4


def test_only_a_real_404_is_final_and_a_500_is_not_called_not_found(server, dataset: Path, tmp_path: Path) -> None:
    ref, path = _ref(server, dataset)
    server.failing[path] = 1000
    with pytest.raises(FetchError, match=r"HTTP 500.*after \d+ attempts") as raised:
        _read(_cache(server, dataset, tmp_path / "a"), ref)
    assert "not found" not in str(raised.value) and ref.url in str(raised.value)
    assert server.gets[path] > 2, "retried"
    missing = ShardRef(f"{server.url}/{dataset.name}/no-such-shard.tar", 10, "0" * 64)
    with pytest.raises(FetchError, match="no-such-shard.tar: not found"):
        _read(_cache(server, dataset, tmp_path / "b"), missing)
    assert server.gets[f"/{dataset.name}/no-such-shard.tar"] == 1, "a 404 is not retried"


def test_a_refused_connection_is_retried_until_the_server_is_back(dataset: Path, tmp_path: Path) -> None:
    port = free_port()
    first = CountingServer(dataset.parent, port)
    ref, path = _ref(first, dataset)
    first.close()  # restarting: connections are refused for a while
    servers = []
    restart = threading.Timer(0.6, lambda: servers.append(CountingServer(dataset.parent, port)))
    restart.start()
    try:
        data = _read(_cache(first, dataset, tmp_path / "cache", RetryPolicy(first_delay=0.2, budget=600)), ref)
    finally:
        restart.join()
        for started in servers:
            started.close()
    assert data == (dataset / _shards(dataset)[0]["name"]).read_bytes()


def test_a_failed_shard_is_tried_again_in_a_later_epoch(server, dataset: Path, tmp_path: Path, monkeypatch) -> None:
    """A shard that failed was skipped for the rest of the loader's life (a sticky `.failed` marker
    and each reader's memory): the next epoch tries it again, without waiting out any budget."""
    monkeypatch.setenv("IOFEED_RETRY_SECONDS", "0.6")
    _, path = _ref(server, dataset, 2)
    server.failing[path] = 10**6
    with iofeed.loader(f"{server.url}/{dataset.name}", cache=iofeed.Cache(dir=tmp_path / "cache"),
                       skips=iofeed.Skips(on_error="skip"),
                       **KW) as loader:
        first = sum(len(labels) for _, labels in loader)
        refilled = loader.stats.refilled  # spares (of other shards) that took skipped samples' places
        skipped = dict(loader.stats.skipped)
        examples = list(loader.stats.skipped_examples)
        server.failing.clear()
        second = sum(len(labels) for _, labels in loader)
    lost = _shards(dataset)[2]["samples"]
    assert skipped == {"shard could not be fetched": lost}
    assert "HTTP 500" in examples[0] and "not found" not in examples[0]
    assert first == len(loader.source) - lost + refilled and second == len(loader.source)
    assert loader.stats.skipped == {"shard could not be fetched": lost}, "nothing more lost in epoch 2"
    assert not list((tmp_path / "cache").rglob(f"*{FAILED}"))


def test_a_manifest_behind_a_500_is_not_reported_missing(server, dataset: Path, monkeypatch) -> None:
    monkeypatch.setenv("IOFEED_RETRY_SECONDS", "0.5")
    server.failing[f"/{dataset.name}/iofeed.json"] = 10**6
    with pytest.raises(SourceError, match="cannot read .*iofeed.json: HTTP 500") as raised:
        open_source(f"{server.url}/{dataset.name}")
    assert "not an iofeed dataset" not in str(raised.value)


@pytest.mark.parametrize("field, value", [("bytes", -5), ("bytes", "abc"), ("sha256", "zz")])
def test_a_shard_entry_the_cache_cannot_trust_is_a_dataset_error(dataset: Path, tmp_path: Path, field: str,
                                                                  value: object) -> None:
    """A negative size was reported as a full cache disk, a size that is text as a raw ValueError."""
    import json
    import shutil

    from iofeed.errors import DatasetError

    copy = tmp_path / dataset.name
    shutil.copytree(dataset, copy)
    manifest = json.loads((copy / "iofeed.json").read_text())
    manifest["splits"]["train"]["shards"][0][field] = value
    (copy / "iofeed.json").write_text(json.dumps(manifest))
    served = CountingServer(tmp_path)
    try:
        says = {"sha256": "shard 'train-000000.tar' has sha256=", "bytes": '"bytes" of shard 0 .* must be an integer'}
        with pytest.raises(DatasetError, match=f"malformed manifest .*: {says[field]}"):
            open_source(f"{served.url}/{copy.name}", cache_dir=tmp_path / "cache")
    finally:
        served.close()


def test_a_bad_retry_budget_is_named(server, dataset: Path, monkeypatch) -> None:
    monkeypatch.setenv("IOFEED_RETRY_SECONDS", "abc")
    with pytest.raises(OptionError, match="IOFEED_RETRY_SECONDS='abc' must be a positive number"):
        open_source(f"{server.url}/{dataset.name}")


# --- item 10: every read is bounded by a deadline --------------------------------------------

def test_a_stalled_body_is_given_up_within_the_budget(server, dataset: Path, tmp_path: Path) -> None:
    ref, path = _ref(server, dataset)
    server.stall.add(path)
    started = time.monotonic()
    with pytest.raises(FetchError, match=f"{ref.url}: timed out.*after 3 attempts"):
        _read(_cache(server, dataset, tmp_path / "cache", STALLING), ref)
    assert time.monotonic() - started < HANG_GUARD_S  # the budget's arithmetic: the injected-clock tests below
    assert server.gets[path] == STALLING.attempts, "a stall is retried, as often as the policy says"


def test_a_body_that_trickles_in_is_given_up_too(server, dataset: Path, tmp_path: Path) -> None:
    """Each read gets a few bytes in time, so no read deadline fires: the whole body has one."""
    ref, path = _ref(server, dataset)
    server.drip.add(path)
    policy = RetryPolicy(attempts=2, first_delay=0.05, budget=600, stall_seconds=0.5, min_rate=65536)
    # The drip would finish the body (64 bytes every 0.1 s): only the whole-body deadline makes this raise.
    with pytest.raises(FetchError, match=f"{ref.url}: timed out \\(TooSlow: .* bytes/s"):
        _read(_cache(server, dataset, tmp_path / "cache", policy), ref)


def test_the_default_budget_bounds_a_server_that_always_stalls() -> None:
    """The default policy, on a fake clock: each attempt stalls its full per-attempt deadline."""
    now = [0.0]
    attempts = []

    def stalled() -> None:
        attempts.append(now[0])
        now[0] += RetryPolicy().stall_seconds
        raise TimeoutError()

    def sleep(seconds: float) -> None:
        now[0] += seconds

    with pytest.raises(TimeoutError) as raised:
        with_retries(stalled, clock=lambda: now[0], sleep=sleep)
    assert now[0] <= RetryPolicy().budget + RetryPolicy().stall_seconds  # 40 s, not 442 s
    assert len(attempts) >= 3
    assert describe(raised.value).startswith("timed out") and f"{len(attempts)} attempts" in describe(raised.value)


def test_time_spent_streaming_is_not_spent_from_the_budget() -> None:
    """A download that streams 20 s and is then cut is retried (four times here, 80 s in all);
    one that streams half its body and then stalls spends its stall from the budget."""
    now, last, calls = [0.0], [0.0], []

    def sleep(seconds: float) -> None:
        now[0] += seconds

    def cut_after_streaming() -> None:
        calls.append(now[0])
        now[0] += 20.0
        last[0] = now[0]  # bytes until the connection resets
        if len(calls) < 4:
            raise ConnectionResetError()

    with_retries(cut_after_streaming, last_data=lambda: last[0], clock=lambda: now[0], sleep=sleep)
    assert len(calls) == 4

    def stalls_mid_body() -> None:
        calls.append(now[0])
        last[0] = now[0] + 0.1  # half the body, then nothing until the per-attempt deadline
        now[0] += RetryPolicy().stall_seconds
        raise TimeoutError()

    calls.clear()
    now[0] = 0.0
    with pytest.raises(TimeoutError):
        with_retries(stalls_mid_body, last_data=lambda: last[0], clock=lambda: now[0], sleep=sleep)
    assert now[0] <= RetryPolicy().budget + RetryPolicy().stall_seconds and len(calls) <= 4


# --- item 2: a full disk, short writes, unverified and tampered cache files -----------------

def test_short_writes_never_leave_a_corrupt_shard_under_its_name(server, dataset: Path, tmp_path: Path,
                                                                  monkeypatch) -> None:
    """A full disk answers a write with a short count: the rest was dropped, and the file renamed
    to the name that claims it verified."""
    real = os.pwrite
    monkeypatch.setattr(os, "pwrite", lambda fd, data, offset: real(fd, bytes(data[:4096]), offset))
    ref, _ = _ref(server, dataset)
    data = _read(_cache(server, dataset, tmp_path / "cache"), ref)
    assert hashlib.sha256(data).hexdigest() == ref.sha256


@pytest.mark.parametrize("error", [errno.ENOSPC, errno.EIO, errno.EROFS])
def test_a_cache_write_error_is_an_error_of_its_own(server, dataset: Path, tmp_path: Path, monkeypatch,
                                                   error: int) -> None:
    def failing(fd: int, data: bytes, offset: int) -> int:
        raise OSError(error, os.strerror(error))

    monkeypatch.setattr(os, "pwrite", failing)
    ref, _ = _ref(server, dataset)
    cache = _cache(server, dataset, tmp_path / "cache")
    with pytest.raises(CacheWriteError) as raised:
        _read(cache, ref)
    message = str(raised.value)
    assert message.startswith("shard could not be cached (") and ref.url in message
    assert str(tmp_path / "cache") in message and "inodes free" in message and os.strerror(error) in message
    assert not [p for p in (tmp_path / "cache").rglob("*") if p.is_file() and (PART in p.name or FAILED in p.name)]
    monkeypatch.undo()
    assert hashlib.sha256(_read(cache, ref)).hexdigest() == ref.sha256, "tried again, not remembered"


@pytest.fixture()
def tiny_disk(tmp_path: Path):
    """A 160 KiB tmpfs (room for two of the tiny dataset's shards) mounted at tmp_path/disk."""
    disk = tmp_path / "disk"
    disk.mkdir()
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=160k", "tmpfs", str(disk)], capture_output=True)
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here ({mounted.stderr.decode().strip()}); "
                    "test_a_cache_write_error_is_an_error_of_its_own injects ENOSPC instead")
    yield disk
    subprocess.run(["umount", "-l", str(disk)], check=True)


def test_a_full_disk_skips_with_a_named_reason_and_keeps_nothing_corrupt(server, dataset: Path, tiny_disk: Path,
                                                                        tmp_path: Path) -> None:
    options = dict(KW, shuffle="none",
                   skips=iofeed.Skips(on_error="skip", max_skipped=None))  # counted here; bounded below
    with iofeed.loader(f"{server.url}/{dataset.name}", cache=iofeed.Cache(dir=tiny_disk, limit=1 << 30),
                       **options) as loader:
        delivered = sum(len(labels) for _, labels in loader)
    with pytest.raises(SampleError, match="shard could not be cached"):  # the default bound: an error
        with iofeed.loader(f"{server.url}/{dataset.name}", cache=iofeed.Cache(dir=tiny_disk, limit=1 << 30),
                           **dict(options, skips=iofeed.Skips(max_skipped=0.05))) as bounded:
            sum(len(labels) for _, labels in bounded)
    assert 0 < delivered < len(loader.source)
    assert set(loader.stats.skipped) == {"shard could not be cached"}, loader.stats.skipped
    assert all("No space left on device" in e and "inodes free" in e for e in loader.stats.skipped_examples)
    by_name = {s["name"]: s["sha256"] for s in _shards(dataset)}
    for path in tiny_disk.rglob("*.tar~*"):
        assert PART not in path.name and not path.name.endswith(FAILED), path
        if not path.name.endswith(".lock"):
            assert hashlib.sha256(path.read_bytes()).hexdigest() == by_name[path.name.split("~")[0]], path


def test_a_default_limit_from_a_small_disk_says_where_it_came_from(server, dataset: Path, tiny_disk: Path) -> None:
    with pytest.raises(OptionError, match=rf"Cache\.limit=[\d,]+ bytes \(the default: what {tiny_disk} holds plus "
                                          r"its free disk .*pass another Cache\.dir\) cannot hold the 16 shards"):
        iofeed.loader(f"{server.url}/{dataset.name}", cache=iofeed.Cache(dir=tiny_disk), **KW)


def test_an_unverified_cached_file_is_checked_before_it_is_served(server, dataset: Path, tmp_path: Path) -> None:
    """A file under a shard's cached name, of the right size but wrong bytes (left by an older
    iofeed on a full disk), was served for ever; it is hashed, found wrong, fetched again."""
    ref, path = _ref(server, dataset)
    cache = _cache(server, dataset, tmp_path / "cache")
    target = cache.path(ref)
    target.parent.mkdir(parents=True)
    good = (dataset / _shards(dataset)[0]["name"]).read_bytes()
    target.write_bytes(good[: len(good) // 2] + bytes(len(good) - len(good) // 2))
    assert _read(cache, ref) == good and server.gets[path] == 1
    target.chmod(0o644)  # a good file an older iofeed left: hashed once, then trusted without a GET
    assert _read(cache, ref) == good and server.gets[path] == 1
    assert not target.stat().st_mode & 0o222


def test_a_cached_name_that_is_a_symbolic_link_is_fetched_again(server, dataset: Path, tmp_path: Path) -> None:
    ref, path = _ref(server, dataset)
    other = _shards(dataset)[1]
    cache = _cache(server, dataset, tmp_path / "cache")
    cache.path(ref).parent.mkdir(parents=True)
    impostor = tmp_path / "impostor"
    impostor.write_bytes((dataset / other["name"]).read_bytes()[: ref.bytes].ljust(ref.bytes, b"\0"))
    impostor.chmod(0o444)
    cache.path(ref).symlink_to(impostor)
    assert _read(cache, ref) == (dataset / _shards(dataset)[0]["name"]).read_bytes()
    assert server.gets[path] == 1 and not cache.path(ref).is_symlink()


def test_a_folder_under_a_cached_name_is_a_cache_error(server, dataset: Path, tmp_path: Path) -> None:
    ref, _ = _ref(server, dataset)
    cache = _cache(server, dataset, tmp_path / "cache")
    (cache.path(ref) / "inside").mkdir(parents=True)
    with pytest.raises(CacheWriteError, match=f"removing {cache.path(ref).name} from"):
        _read(cache, ref)


def test_bookkeeping_that_cannot_be_written_does_not_lose_the_shard(server, dataset: Path, tmp_path: Path,
                                                                    monkeypatch) -> None:
    """The fetch log (statistics) and a lease's age (LRU) are best effort on a full or read-only
    disk: a shard already in place is served."""
    ref, path = _ref(server, dataset)
    cache = _cache(server, dataset, tmp_path / "cache")
    (cache.directory / "fetches.jsonl").mkdir(parents=True)  # the log cannot be appended to
    assert hashlib.sha256(_read(cache, ref)).hexdigest() == ref.sha256

    def read_only(*args, **kwargs):
        raise OSError(errno.EROFS, os.strerror(errno.EROFS))

    monkeypatch.setattr(os, "utime", read_only)
    assert hashlib.sha256(_read(cache, ref)).hexdigest() == ref.sha256 and server.gets[path] == 1


def test_an_empty_failure_marker_is_no_reason(server, dataset: Path, tmp_path: Path) -> None:
    """A 0-byte `.failed` marker (its write hit a full disk) gave skips with an empty reason."""
    ref, path = _ref(server, dataset)
    cache = _cache(server, dataset, tmp_path / "cache")
    cache.path(ref).parent.mkdir(parents=True)
    marker = cache.path(ref).with_name(cache.path(ref).name + FAILED)
    marker.write_bytes(b"")
    os.utime(marker, (time.time() + 1, time.time() + 1))  # written after the cache was opened
    assert hashlib.sha256(_read(cache, ref)).hexdigest() == ref.sha256


# --- item 11: stale partial downloads, and a cache too small for the order ----------------

def test_stale_partial_downloads_are_removed_when_a_dataset_is_opened(server, dataset: Path, tmp_path: Path) -> None:
    """A part file of a dead writer: its PID gone, or reused by a live process (PID 1 here) while
    nobody holds the shard's download lock. One being written (lock held) stays."""
    ref, _ = _ref(server, dataset)
    cache = _cache(server, dataset, tmp_path / "cache")
    folder = cache.path(ref).parent
    folder.mkdir(parents=True)
    dead = subprocess.Popen(["true"])
    dead.wait()
    stale = [folder / f"{ref.cached_name}{PART}{dead.pid}-1", folder / f"{ref.cached_name}{PART}1-1"]
    live_ref, _ = _ref(server, dataset, 1)
    writing = folder / f"{live_ref.cached_name}{PART}1-2"
    for part in [*stale, writing]:
        part.write_bytes(b"x" * 1000)
    lock = os.open(folder / f"{live_ref.cached_name}.lock", os.O_RDWR | os.O_CREAT)
    try:
        fcntl.flock(lock, fcntl.LOCK_EX)
        open_source(f"{server.url}/{dataset.name}", cache_dir=tmp_path / "cache")
    finally:
        os.close(lock)
    assert [p.exists() for p in [*stale, writing]] == [False, False, True]


def test_a_cache_too_small_for_the_orders_live_shards_warns_with_the_numbers(server, dataset: Path,
                                                                           tmp_path: Path) -> None:
    largest = max(s["bytes"] for s in _shards(dataset))
    with pytest.warns(RuntimeWarning, match=rf"Cache\.limit={largest + 1:,} bytes holds 1 shards of {largest:,} "
                                            r"bytes, below the 3 .*--shard-mb"):
        loader = iofeed.loader(f"{server.url}/{dataset.name}",
                               cache=iofeed.Cache(dir=tmp_path / "cache", limit=largest + 1), shuffle="none", **KW)
    loader.close()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        iofeed.loader(f"{server.url}/{dataset.name}", cache=iofeed.Cache(dir=tmp_path / "cache", limit=1 << 30),
                      shuffle="none", **KW).close()


def test_a_wait_for_room_is_said_once(server, dataset: Path, tmp_path: Path, monkeypatch) -> None:
    import iofeed.sources.remote.cache as cache_module

    monkeypatch.setattr(cache_module, "ROOM_WAIT_SECONDS", 0.6)
    first, _ = _ref(server, dataset, 0)
    second, _ = _ref(server, dataset, 1)
    cache = _cache(server, dataset, tmp_path / "cache", limit=first.bytes + 10)
    held = cache.acquire(first)  # leased: cannot be evicted
    try:
        with pytest.warns(RuntimeWarning, match=r"Cache\.limit=.* too small for the shards live at once"):
            os.close(cache.acquire(second))
    finally:
        os.close(held)


# --- item 15 and 17: unusable cache folders, uploads that name the URL, http is read-only ----

def test_a_cache_dir_that_is_a_file_is_one_line(server, dataset: Path, tmp_path: Path) -> None:
    (tmp_path / "file").write_text("x")
    with pytest.raises(OptionError, match=f"cannot use {tmp_path / 'file'} as Cache.dir: a file is in the way"):
        open_source(f"{server.url}/{dataset.name}", cache_dir=tmp_path / "file")


def test_a_read_only_cache_dir_is_refused_at_open(server, dataset: Path, tmp_path: Path, monkeypatch) -> None:
    """Root writes anywhere: the denial is injected (EACCES on creating a file in the folder)."""
    real = os.open

    def denied(path, flags, *args, **kwargs):
        if str(path).startswith(str(tmp_path / "ro")) and flags & os.O_CREAT:
            raise PermissionError(errno.EACCES, os.strerror(errno.EACCES), str(path))
        return real(path, flags, *args, **kwargs)

    (tmp_path / "ro").mkdir()
    monkeypatch.setattr(os, "open", denied)
    with pytest.raises(OptionError,
                       match=r"cannot use .*ro as Cache\.dir: Permission denied; pass cache=iofeed\.Cache\(dir="):
        open_source(f"{server.url}/{dataset.name}", cache_dir=tmp_path / "ro")


def test_a_cache_dir_under_home_is_expanded(server, dataset: Path, tmp_path: Path, monkeypatch) -> None:
    """`cache_dir="~/cache"` made a folder named "~" in the working directory."""
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.chdir(tmp_path)
    source = open_source(f"{server.url}/{dataset.name}", cache_dir="~/cache")
    assert source.remote.cache.root == tmp_path / "home" / "cache" and not (tmp_path / "~").exists()


def test_an_unusable_default_cache_folder_says_how_to_choose_one(server, dataset: Path, monkeypatch) -> None:
    for name in ("IOFEED_CACHE", "XDG_CACHE_HOME"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HOME", "/proc")
    with pytest.raises(OptionError, match=r"cannot use /proc/.cache/iofeed as the default cache folder .*IOFEED_CACHE"):
        open_source(f"{server.url}/{dataset.name}")


def test_an_http_url_without_a_dataset_does_not_suggest_uploading_there(server, dataset: Path) -> None:
    with pytest.raises(SourceError, match="not an iofeed dataset") as raised:
        open_source(f"{server.url}/nothing-here.iof")
    assert "-o http" not in str(raised.value) and "read-only" in str(raised.value)


def test_preprocess_to_a_missing_bucket_fails_before_any_work(dataset: Path, tmp_path: Path, monkeypatch,
                                                             capsys) -> None:
    pytest.importorskip("moto.server")
    import iofeed.prepare.run as run

    def no_work(*args, **kwargs):
        raise AssertionError("preprocessing started before the bucket was checked")

    port = free_port()
    monkeypatch.setenv("AWS_ENDPOINT_URL", f"http://127.0.0.1:{port}")
    for name, value in (("AWS_ACCESS_KEY_ID", "testing"), ("AWS_SECRET_ACCESS_KEY", "testing"),
                        ("AWS_DEFAULT_REGION", "us-east-1")):
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("IOFEED_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(run, "preprocess", no_work)
    url = "s3://no-such-bucket/c.iof"
    with moto_s3(port):
        assert main(["preprocess", str(dataset.parent / "tiny"), "-o", url, "--workers", "1"]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and url in err[0] and "bucket 'no-such-bucket' does not exist" in err[0], err


def test_describe_tells_a_server_error_from_a_missing_object() -> None:
    import aiohttp

    def response_error(status: int) -> aiohttp.ClientResponseError:
        return aiohttp.ClientResponseError(None, (), status=status, message="Boom")  # type: ignore[arg-type]

    def wrapped(cause: BaseException) -> FileNotFoundError:
        try:
            raise FileNotFoundError("http://x/a.tar") from cause
        except FileNotFoundError as exc:
            return exc

    assert describe(wrapped(response_error(500))) == "HTTP 500 Boom"
    assert describe(wrapped(response_error(404))) == "not found (HTTP 404)"
    assert describe(wrapped(response_error(403))) == "access denied (HTTP 403)"
    assert describe(FileNotFoundError("gone")) == "not found"
    assert describe(wrapped(aiohttp.ClientConnectionError("refused"))) == "ClientConnectionError: refused"


def test_a_connection_error_wrapping_a_plain_os_error_stays_transient() -> None:
    """Following causes must not lose what the outer error said: aiohttp's ClientConnectorError
    raised from a DNS failure (socket.gaierror, a plain OSError) is still a connection error."""
    import socket

    import aiohttp

    from iofeed.sources.remote.retry import is_transient

    try:
        try:
            raise socket.gaierror(-2, "Name or service not known")
        except OSError as exc:
            raise aiohttp.ClientConnectorError(None, exc) from exc  # type: ignore[arg-type]
    except aiohttp.ClientConnectorError as exc:
        assert is_transient(exc)


def test_an_unexpected_error_in_a_download_thread_does_not_stall_the_prefetcher() -> None:
    """A download thread's exception other than FetchError/OSError left its pin "downloading" for
    good: four of them and the prefetcher never started another download."""
    from types import SimpleNamespace

    import numpy as np

    from iofeed.sources.remote.prefetch import Prefetcher

    acquired, lock = [], threading.Lock()

    def acquire(file_id: int, cancel: object = None) -> int:
        with lock:
            acquired.append(file_id)
        if file_id < 4:
            raise ValueError("a library's surprise")
        return os.open(os.devnull, os.O_RDONLY)

    remote = SimpleNamespace(acquire=acquire, refs=[SimpleNamespace(bytes=10)] * 6, cache=SimpleNamespace(limit=1000))
    shard_of = np.repeat(np.arange(6), 4)
    prefetcher = Prefetcher(remote, shard_of, [np.arange(24)], 0, lambda: [])
    try:
        deadline = time.monotonic() + HANG_GUARD_S
        while len(acquired) < 6 and time.monotonic() < deadline:
            time.sleep(0.01)
    finally:
        prefetcher.close()
    assert sorted(acquired) == list(range(6))


def test_a_closed_loaders_download_stops_instead_of_retrying_on(server, dataset: Path, tmp_path: Path) -> None:
    """A prefetcher's download against a stalled server went on retrying after close() (the
    process then took the whole retry budget to exit); cancelling stops it at its next read."""
    from iofeed.sources.remote.cache import Cancelled

    ref, path = _ref(server, dataset)
    server.stall.add(path)
    # Without the cancel, this policy retries for ten minutes: the join below can only tell.
    cache = _cache(server, dataset, tmp_path / "cache", RetryPolicy(attempts=10**6, budget=600, stall_seconds=0.5))
    cancel, outcome = threading.Event(), []

    def fetch() -> None:
        try:
            cache.acquire(ref, cancel)
        except Exception as exc:  # noqa: BLE001 - recorded for the assertion
            outcome.append(exc)

    thread = threading.Thread(target=fetch)
    thread.start()
    time.sleep(0.3)
    cancel.set()
    thread.join(HANG_GUARD_S)
    assert not thread.is_alive(), "still retrying after close()"
    assert isinstance(outcome[0], Cancelled)
    assert not [p for p in cache.directory.iterdir() if FAILED in p.name or PART in p.name]


@pytest.fixture(scope="module")
def s3_proxy(dataset: Path):
    """moto's S3 with the tiny dataset, behind a proxy on 127.0.0.1 that injects 500s."""
    pytest.importorskip("moto.server")
    from iofeed.prepare.upload import upload_dataset

    env = pytest.MonkeyPatch()
    for name, value in (("AWS_ACCESS_KEY_ID", "testing"), ("AWS_SECRET_ACCESS_KEY", "testing"),
                        ("AWS_DEFAULT_REGION", "us-east-1")):
        env.setenv(name, value)
    port = free_port()
    with moto_s3(port):
        import fsspec

        fsspec.filesystem("s3", endpoint_url=f"http://127.0.0.1:{port}", skip_instance_cache=True).mkdir("faults")
        env.setenv("AWS_ENDPOINT_URL", f"http://127.0.0.1:{port}")
        upload_dataset(dataset, "s3://faults/tiny.iof")
        proxy = FaultProxy(f"http://127.0.0.1:{port}")
        env.setenv("AWS_ENDPOINT_URL", proxy.url)
        yield proxy
        proxy.close()
    env.undo()


def test_s3_server_errors_on_ranged_reads_are_retried_and_named(s3_proxy, dataset: Path, tmp_path: Path) -> None:
    """s3fs turns a 500 it does not know into OSError(EIO) (its own and botocore's retries are off:
    ours keep the budget): retried, and named as what it was."""
    shard = _shards(dataset)[0]
    ref = ShardRef(f"s3://faults/tiny.iof/{shard['name']}", shard["bytes"], shard["sha256"])
    cache = ShardCache(tmp_path / "cache", "s3://faults/tiny.iof", 1 << 30, {"endpoint_url": s3_proxy.url},
                       retry=SHORT)
    key = f"/faults/tiny.iof/{shard['name']}"
    s3_proxy.failing[key] = 3
    assert hashlib.sha256(_read(cache, ref)).hexdigest() == ref.sha256
    assert s3_proxy.seen[key] >= 4
    s3_proxy.failing[key] = 10**6
    other = ShardCache(tmp_path / "other", "s3://faults/tiny.iof", 1 << 30, {"endpoint_url": s3_proxy.url},
                       retry=SHORT)
    with pytest.raises(FetchError, match=r"HTTP 500.*after \d+ attempts") as raised:
        _read(other, ref)
    assert "not found" not in str(raised.value)
    s3_proxy.failing.clear()


def test_an_s3_manifest_behind_a_500_is_named_so(s3_proxy, tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("IOFEED_RETRY_SECONDS", "0.5")
    s3_proxy.failing["/faults/tiny.iof/iofeed.json"] = 10**6
    try:
        with pytest.raises(SourceError, match=r"cannot read s3://faults/tiny.iof/iofeed.json: HTTP 500"):
            open_source("s3://faults/tiny.iof", cache_dir=tmp_path / "cache")
    finally:
        s3_proxy.failing.clear()
    assert len(open_source("s3://faults/tiny.iof", cache_dir=tmp_path / "cache")) > 0


def test_a_download_held_by_a_hung_process_is_waited_for_within_a_bound(server, dataset: Path, tmp_path: Path,
                                                                          monkeypatch) -> None:
    """A rank stopped (SIGSTOP, a debugger) while it held a shard's download lock made every other
    rank of the node wait for ever; they wait as long as a download may take, then say who holds it."""
    ref, _ = _ref(server, dataset)
    policy = RetryPolicy(attempts=2, budget=0.2, stall_seconds=0.1, min_rate=float(1 << 30))
    cache = _cache(server, dataset, tmp_path / "cache", policy)
    cache.path(ref).parent.mkdir(parents=True)
    (cache.path(ref).parent / f"{ref.cached_name}{PART}4242-1").write_bytes(b"")
    lock = os.open(cache.path(ref).with_name(ref.cached_name + ".lock"), os.O_RDWR | os.O_CREAT)
    fcntl.flock(lock, fcntl.LOCK_EX)  # the hung holder
    import iofeed.sources.remote.cache as cache_module

    monkeypatch.setattr(cache_module, "ROOM_WAIT_SECONDS", 0.1)
    outcome: list[BaseException] = []

    def fetch() -> None:
        try:
            _read(cache, ref)
        except FetchError as exc:
            outcome.append(exc)

    thread = threading.Thread(target=fetch, daemon=True)
    try:
        thread.start()
        thread.join(HANG_GUARD_S)
    finally:
        os.close(lock)
    assert not thread.is_alive(), "waited for ever"
    assert "another process of this node (pid 4242) has held its download" in str(outcome[0])
