"""Epoch boundaries of a streamed dataset with a small cache: the gap before each epoch's first
batch, which process fetched the shards (the loader's prefetcher, or a worker that had to stop
and download one itself), and the largest size the cache reached against its limit.

    python scripts/streamed_boundary.py DATASET.iof [--cache-share 0.1] [--block-shards 2] [--epochs 6]

DATASET is served over HTTP from 127.0.0.1 (the stdlib's `http.server`); preprocess it with small
shards (`--shard-mb 1`) so that a cache of `--cache-share` of the split must evict.
"""
from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import iofeed
from iofeed.sources.remote.cache import eviction_lock
from iofeed.sources.remote.cache_dir import cache_usage


def serve(folder: Path) -> tuple[subprocess.Popen, int]:
    """An HTTP server of `folder` on a free loopback port, once it answers."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    server = subprocess.Popen([sys.executable, "-m", "http.server", str(port), "--bind", "127.0.0.1",
                               "-d", str(folder)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 10
    while True:
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), timeout=1):
            return server, port
        if time.monotonic() > deadline:
            raise SystemExit("the HTTP server did not start")
        time.sleep(0.05)


class PeakUsage:
    """The largest cache size seen, read under the cache's eviction lock (a consistent view)."""

    def __init__(self, root: Path) -> None:
        self.root, self.peak, self._done = root, 0, threading.Event()
        self._thread = threading.Thread(target=self._watch, daemon=True)
        self._thread.start()

    def _watch(self) -> None:
        while not self._done.wait(0.02):
            with eviction_lock(self.root):
                self.peak = max(self.peak, cache_usage(self.root))

    def stop(self) -> int:
        self._done.set()
        self._thread.join()
        return self.peak


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("dataset", type=Path)
    parser.add_argument("--cache-share", type=float, default=0.1, help="cache limit as a share of the split")
    parser.add_argument("--block-shards", type=int, default=2)
    parser.add_argument("--epochs", type=int, default=6)
    args = parser.parse_args()
    split_bytes = sum(p.stat().st_size for p in args.dataset.glob("train-*.tar"))
    limit = int(split_bytes * args.cache_share)
    server, port = serve(args.dataset.parent)
    cache = Path(tempfile.mkdtemp(prefix="iofeed-cache-"))
    usage = PeakUsage(cache)
    try:
        with iofeed.loader(f"http://127.0.0.1:{port}/{args.dataset.name}", batch_size=32, image_size=64, workers=2,
                           seed=0, cache=iofeed.Cache(dir=cache, limit=limit),
                           order=iofeed.Order(block_shards=args.block_shards)) as ld:
            log = ld.source.remote.cache
            last = time.perf_counter()
            for epoch in range(args.epochs):
                offset, gaps = log.log_offset(), []
                for _ in ld:
                    now = time.perf_counter()
                    gaps.append(now - last)
                    last = now
                by_workers = sum(f["pid"] != os.getpid() for f in log.fetches_since(offset))
                first, inside = gaps[0], gaps[1:]
                print(f"epoch {epoch}: first batch after {first:.3f} s; inside: median {statistics.median(inside):.3f} "
                      f"s, max {max(inside):.3f} s; shards fetched by workers: {by_workers}", flush=True)
            print(f"next-epoch batches started early: {ld.engine.started_ahead}; fetched: {ld.stats.fetched}")
    finally:
        peak = usage.stop()
        server.kill()
        shutil.rmtree(cache)
    print(f"cache limit {limit:,} bytes; largest size {peak:,} bytes ({peak / limit:.2f}x the limit)")


main()
