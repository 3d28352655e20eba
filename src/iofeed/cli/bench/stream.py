"""The streaming feeds' object store: moto's S3 server on 127.0.0.1, in the bench's own process, holding
a copy of the dataset, so that streaming is measured beside local disk without leaving the machine."""
from __future__ import annotations

import logging
import os
import shutil
import socket
import tempfile
from pathlib import Path
from typing import Any

from ...errors import FeedUnavailable, require
from ...options.groups import Cache, Order
from ...sources.remote.cache import ShardCache

BUCKET = "iofeed-bench"
# moto accepts any credentials; the bench's host processes take these (and the endpoint) from the spec
CREDENTIALS = {"AWS_ACCESS_KEY_ID": "iofeed-bench", "AWS_SECRET_ACCESS_KEY": "iofeed-bench",
               "AWS_DEFAULT_REGION": "us-east-1"}
COLD_SHARE = 0.1  # the cold feed's cache holds a tenth of the dataset: every shard is fetched every epoch
COLD_BLOCK = 2  # the cold feed's block_shards, so that small datasets still stream
CACHE_PREFIX = ".iofeed-bench-cache-"  # + the bench's PID: the streaming feeds' own cache folder, beside the results


class LocalEndpoint:
    """moto's standalone S3 server on a free loopback port, with `dataset` uploaded to it, and the
    streaming feeds' own cache folder (`cache_root`, made in `beside`): never the user's node cache,
    and removed by `close()` with everything the feeds fetched into it."""

    def __init__(self, dataset: Path, beside: Path) -> None:
        require("moto.server", "bench")
        require("s3fs", "bench")
        from moto.server import ThreadedMotoServer

        from ...prepare.upload import upload_dataset

        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            port = probe.getsockname()[1]
        logging.getLogger("werkzeug").setLevel(logging.ERROR)  # not a line per request in the bench's output
        self._server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
        self._server.start()
        self.endpoint = f"http://127.0.0.1:{port}"
        self._saved = {name: os.environ.get(name) for name in [*CREDENTIALS, "AWS_ENDPOINT_URL"]}
        use_endpoint(self.endpoint)
        self.url = f"s3://{BUCKET}/{Path(dataset).name}"
        from ...sources.remote.urls import filesystem

        remove_left_behind(beside)
        self.cache_root = Path(tempfile.mkdtemp(prefix=f"{CACHE_PREFIX}{os.getpid()}-", dir=beside))
        try:
            try:
                filesystem(self.url).mkdir(BUCKET)
            except FileExistsError:
                pass  # moto's store is per process: an earlier bench of this process made the bucket
            upload_dataset(Path(dataset), self.url, overwrite=True)  # the bench's own store, nobody else's
        except BaseException:
            self.close()
            raise

    def close(self) -> None:
        """Stop the server (its objects go with it), remove the feeds' cache folder and restore the
        AWS variables."""
        self._server.stop()
        shutil.rmtree(self.cache_root, ignore_errors=True)
        for name, value in self._saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def remove_left_behind(folder: Path) -> list[Path]:
    """Remove the feeds' cache folders that benches killed outright (SIGKILL, power loss) left in
    `folder`: those whose process is gone. Which were removed."""
    removed = []
    for path in folder.glob(f"{CACHE_PREFIX}*"):
        pid = path.name[len(CACHE_PREFIX):].split("-")[0]
        try:
            os.kill(int(pid), 0)
        except ProcessLookupError:
            shutil.rmtree(path, ignore_errors=True)
            removed.append(path)
        except (ValueError, PermissionError):
            continue  # not of this form, or another user's live process
    return removed


def use_endpoint(endpoint: str) -> None:
    """Point this process (and the workers it starts later) at the local endpoint."""
    os.environ.update(CREDENTIALS, AWS_ENDPOINT_URL=endpoint)


def stream_options(url: str, temperature: str, cache_root: Path) -> dict[str, Any]:
    """The loader's cache arguments for a streaming feed: a new folder in the bench's `cache_root`
    (removed again when this fails). "cold": a cache holding a tenth of the dataset (at least the 4
    live shards of blocks of 2, plus 2 being fetched), so that shards are evicted and fetched again
    all along; "warm": a cache holding the split, every shard fetched before the feed starts."""
    folder = tempfile.mkdtemp(prefix=f"{temperature}-", dir=cache_root)
    try:
        return _stream_options(url, temperature, folder)
    except BaseException:
        shutil.rmtree(folder, ignore_errors=True)
        raise


def _stream_options(url: str, temperature: str, folder: str) -> dict[str, Any]:
    from ...sources.samples import open_source

    remote = open_source(url, "train", cache_dir=folder, cache_limit=1 << 62).remote  # limits set below
    assert remote is not None, f"{url} opened as a local dataset"
    total = sum(r.bytes for r in remote.refs)
    if temperature == "cold":
        limit = max(int(total * COLD_SHARE), (2 * COLD_BLOCK + 2) * remote.largest)
        if limit >= total:
            raise FeedUnavailable(
                f"cannot stream cold: the smallest cache that streams holds {2 * COLD_BLOCK + 2} shards "
                f"({limit / 2**20:,.0f} MiB), and the whole split is {len(remote.refs)} shard"
                f"{'s' if len(remote.refs) != 1 else ''} ({total / 2**20:,.0f} MiB), so each shard would be fetched "
                "once; preprocess with --shard-mb 4 for a dataset that streams")
        return {"cache": Cache(dir=folder, limit=limit), "order": Order(block_shards=COLD_BLOCK)}
    cache = ShardCache(Path(folder), url, total, remote.cache.settings)
    for ref in remote.refs:
        os.close(cache.acquire(ref))
    return {"cache": Cache(dir=folder, limit=total)}
