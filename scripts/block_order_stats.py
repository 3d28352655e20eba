"""How close the block order is to a global shuffle, and what each costs in bytes fetched.

Usage: python scripts/block_order_stats.py DATASET [--batch 256] [--shard-mb 128 32 4]

Reads the train table of an iofeed dataset (labels, write order, stored sizes), re-cuts it into
shards of each size (as `preprocess --shard-mb` would, in the same write order), and reports per
order: distinct labels per batch, the largest share of a batch from one class and from one shard,
and the bytes one node fetches per epoch through an LRU cache of 10% of the dataset.
"""
from __future__ import annotations

import argparse
from collections import OrderedDict
from pathlib import Path

import numpy as np

from iofeed.format.manifest import Manifest
from iofeed.format.table import load_table
from iofeed.sources.order import OrderSpec

TAR_OVERHEAD = 3 * 512  # member header, label member header and data, per sample (plus padding)


def recut(sizes: np.ndarray, shard_bytes: int) -> np.ndarray:
    """Shard of each sample, in write order, for shards of at most `shard_bytes`."""
    stored = (-(-sizes // 512) * 512) + TAR_OVERHEAD
    shard, used, out = 0, 0, np.empty(len(sizes), np.int64)
    for i, size in enumerate(stored):
        if used and used + size > shard_bytes:
            shard, used = shard + 1, 0
        out[i], used = shard, used + size
    return out


def lru_fetched(order: np.ndarray, shard_of: np.ndarray, shard_size: np.ndarray, limit: int) -> int:
    """Bytes fetched reading `order` through an LRU cache of `limit` bytes of whole shards."""
    cache: OrderedDict[int, int] = OrderedDict()
    used = fetched = 0
    for shard in shard_of[order]:
        shard = int(shard)
        if shard in cache:
            cache.move_to_end(shard)
            continue
        while cache and used + shard_size[shard] > limit:
            used -= cache.popitem(last=False)[1]
        cache[shard] = int(shard_size[shard])
        used += cache[shard]
        fetched += cache[shard]
    return fetched


def batch_stats(order: np.ndarray, labels: np.ndarray, shard_of: np.ndarray, batch: int) -> tuple[float, float, float]:
    """Mean distinct labels per batch, mean largest class share, mean largest shard share."""
    distinct, top_class, top_shard = [], [], []
    for start in range(0, len(order) - batch + 1, batch):
        part = order[start:start + batch]
        counts = np.bincount(labels[part])
        distinct.append(np.count_nonzero(counts))
        top_class.append(counts.max() / batch)
        top_shard.append(np.bincount(shard_of[part]).max() / batch)
    return float(np.mean(distinct)), float(np.mean(top_class)), float(np.mean(top_shard))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("dataset", type=Path)
    parser.add_argument("--batch", type=int, default=256)
    parser.add_argument("--shard-mb", type=float, nargs="+", default=[128, 32, 4])
    parser.add_argument("--block-shards", type=int, default=8)
    args = parser.parse_args()
    manifest = Manifest.read(args.dataset)
    table = load_table(args.dataset / manifest.splits["train"].table)
    labels, sizes = table["label"], table["size"]
    print(f"{len(labels)} train samples, {len(manifest.classes)} classes, batch {args.batch}")
    print("shard MiB | shards | order  | labels/batch | top class | top shard | fetched/epoch (10% cache)")
    for shard_mb in args.shard_mb:
        shard_of = recut(sizes, int(shard_mb * 2**20))
        shard_size = np.bincount(shard_of, weights=(-(-sizes // 512) * 512) + TAR_OVERHEAD).astype(np.int64)
        total = int(shard_size.sum())
        for mode in ("global", "block"):
            spec = OrderSpec(len(labels), args.batch, mode, True, seed=0, block_shards=args.block_shards,
                             shard_of=shard_of)
            order = spec.rank_indices(0)
            distinct, top_class, top_shard = batch_stats(order, labels, shard_of, args.batch)
            fetched = lru_fetched(order, shard_of, shard_size, max(total // 10, int(shard_size.max())))
            print(f"{shard_mb:9g} | {len(shard_size):6d} | {mode:6s} | {distinct:12.1f} | {top_class:9.3f} | "
                  f"{top_shard:9.3f} | {fetched / total:6.2f} x dataset")


if __name__ == "__main__":
    main()
