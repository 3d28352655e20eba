"""Opening a dataset URL: the manifest and sample table fetched now, the shards through the node cache."""
from __future__ import annotations

import io
import os
import threading
import warnings
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from ...errors import DatasetError, OptionError, SourceError
from ...format.manifest import MANIFEST_NAME, Manifest, SplitInfo
from ...format.table import load_table
from .cache import ShardCache, ShardRef, remove_stale_parts
from .cache_dir import RESERVE_BYTES, RESERVE_SHARE, claim_cache_dir, resolve_limit
from .retry import RetryPolicy, describe, is_transient, policy_from_env, with_retries
from .urls import filesystem, join, scheme

if TYPE_CHECKING:
    from ..order import OrderSpec

GLOBAL_OPEN_SHARDS = 64  # shards one reader keeps leased under a global shuffle
HEX = set("0123456789abcdef")


@dataclass
class RemoteShards:
    """The shards of a streamed split and the node cache they are read through (pickled into workers)."""

    cache: ShardCache
    refs: list[ShardRef]
    open_limit: int = 16  # shards one reader keeps leased at a time (set from the order)
    log_start: int = 0  # the node's fetch log offset when the dataset was opened
    limit_from_disk: bool = False  # Cache.limit was not given: the free disk set it

    @property
    def _limit(self) -> str:
        """The limit, and where it came from when nobody chose it, for messages."""
        text = f"Cache.limit={self.cache.limit:,} bytes"
        if self.limit_from_disk:
            text += (f" (the default: what {self.cache.root} holds plus its free disk less a reserve of "
                     f"{RESERVE_BYTES >> 30} GiB or {RESERVE_SHARE:.0%} of the free disk, whichever is larger; free "
                     "disk there or pass another Cache.dir)")
        return text

    def acquire(self, file_id: int, cancel: threading.Event | None = None) -> int:
        """A leased descriptor of shard `file_id`'s cached copy (see `ShardCache.acquire`)."""
        return self.cache.acquire(self.refs[file_id], cancel)

    def fetched(self) -> dict[str, float]:
        """Downloads of this dataset on this node (by any process) since it was opened."""
        records = self.cache.fetches_since(self.log_start)
        return {"shards": len(records), "bytes": sum(r["bytes"] for r in records),
                "seconds": round(sum(r["seconds"] for r in records), 3)}

    @property
    def largest(self) -> int:
        """Bytes of the largest shard."""
        return max((ref.bytes for ref in self.refs), default=0)

    def fit_order(self, order: OrderSpec, readers: int = 1) -> None:
        """Check that the cache can hold what `order` keeps live, size the readers' leases to it, and
        warn once when it holds too little for full speed with `readers` reading processes."""
        total = sum(ref.bytes for ref in self.refs)
        if order.shuffle == "block":
            # a block, and the next one while ranks cross into it: never more shards than the split has
            live = min(2 * order.block_shards, len(self.refs))
            need = min(live * self.largest, total)
            if self.cache.limit < need:
                raise OptionError(
                    f"{self._limit} cannot hold the {live} shards of "
                    f"{self.largest} bytes live with Order.block_shards={order.block_shards}: raise Cache.limit to "
                    f"at least {need} or lower Order.block_shards")
            self.open_limit = live
            self._warn_small(min(live + 1, len(self.refs)),
                             f"2 blocks of Order.block_shards={order.block_shards} and one ahead",
                             "or a smaller Order.block_shards")
        elif order.shuffle == "global":
            if self.cache.limit < total:
                raise OptionError(
                    f"shuffle='global' reads every shard all epoch long, and {self._limit} "
                    f"is below the split's {total}: raise Cache.limit or use shuffle='block'")
            self.open_limit = GLOBAL_OPEN_SHARDS
        else:
            self.open_limit = 2
            self._warn_small(min(2 * max(readers, 1) + 1, len(self.refs)),
                             f"2 per reading process, {max(readers, 1)} of them, and one ahead", "")

    def _warn_small(self, shards: int, what: str, also: str) -> None:
        """Warn (with the numbers) when the cache cannot hold `shards` of the largest at once:
        fetches then wait for leases to end, and an epoch runs many times slower (measured:
        docs/decisions/0065-dataset-warns-when-the-cache-cannot-hold.md)."""
        need = min(shards * self.largest, sum(ref.bytes for ref in self.refs))
        if self.cache.limit < need:
            warnings.warn(
                f"{self._limit} holds {self.cache.limit // max(self.largest, 1)} shards of "
                f"{self.largest:,} bytes, below the {shards} this order keeps live ({what}): fetches will wait for "
                f"room and an epoch may run many times slower; raise Cache.limit to at least {need:,}, or use "
                f"smaller shards (`iofeed preprocess --shard-mb`){' ' + also if also else ''}",
                RuntimeWarning, stacklevel=4)


def _cat(url: str, settings: dict[str, Any], policy: RetryPolicy) -> bytes:
    data: bytes = with_retries(lambda: filesystem(url, settings, policy).cat_file(url), policy)
    return data


def _upload_hint(url: str) -> str:
    """How to put a dataset at `url`: upload it there, or (http is read-only) serve one."""
    if scheme(url).writable:
        return f"upload with `iofeed preprocess SRC -o {url}`"
    return ("http(s) is read-only: serve a folder made by `iofeed preprocess SRC -o DIR`, "
            "or upload to s3:// or gs:// with `iofeed preprocess SRC -o s3://BUCKET/NAME.iof`")


def read_manifest(url: str, settings: dict[str, Any] | None = None) -> Manifest:
    """The manifest of the dataset at `url`; SourceError when there is none (or it cannot be read)."""
    url = url.rstrip("/")
    settings = scheme(url).settings() if settings is None else settings
    policy = policy_from_env()  # a bad IOFEED_RETRY_SECONDS is its own error, not "cannot read"
    try:
        text = _cat(join(url, MANIFEST_NAME), settings, policy).decode("utf-8")
    except FileNotFoundError as exc:
        if is_transient(exc):  # a 500 or a refused connection that a library reports as "not found"
            raise SourceError(f"cannot read {join(url, MANIFEST_NAME)}: {describe(exc)}") from None
        raise SourceError(f"{url} is not an iofeed dataset: it has no {MANIFEST_NAME} (an upload that never "
                          f"finished, or a wrong URL; {_upload_hint(url)})") from None
    except UnicodeDecodeError:
        raise DatasetError(f"{join(url, MANIFEST_NAME)} is not text") from None
    except Exception as exc:  # noqa: BLE001 - storage errors of any library, named by URL
        raise SourceError(f"cannot read {join(url, MANIFEST_NAME)}: {describe(exc)}") from None
    return Manifest.parse(text, join(url, MANIFEST_NAME))


@dataclass
class RemoteSplit:
    """One split of a dataset URL, opened: its manifest and table fetched, its shards read through the cache."""

    manifest: Manifest
    info: SplitInfo
    table: np.ndarray
    files: np.ndarray  # each shard's URL
    where: str  # the table's URL, for messages
    shards: RemoteShards


def _shard_ref(url: str, shard: dict[str, Any]) -> ShardRef:
    """The ShardRef of one manifest entry (its size already checked by `Manifest.parse`); DatasetError
    naming the manifest for a checksum that is not a sha256 (it decides what the cache trusts)."""
    digest = shard.get("sha256", "")
    if not (digest == "" or (len(digest) == 64 and set(digest) <= HEX)):
        raise DatasetError(f"malformed manifest {join(url, MANIFEST_NAME)}: shard {shard.get('name')!r} has "
                           f"sha256={digest!r}, not a sha256 hex digest (upload the dataset again)")
    return ShardRef(join(url, shard["name"]), shard["bytes"], digest)


def open_remote(url: str, split: str, cache_dir: str | os.PathLike[str] | None = None,
                cache_limit: int | None = None) -> RemoteSplit:
    """Open split `split` of the iofeed dataset at `url`; shards are fetched when first read."""
    url = url.rstrip("/")
    settings = scheme(url).settings()
    root = claim_cache_dir(cache_dir)  # before any request: a cache that cannot work fails at once
    manifest = read_manifest(url, settings)
    info = manifest.split(split, url)
    where = join(url, info.table)
    try:
        data = _cat(where, settings, policy_from_env())
    except Exception as exc:  # noqa: BLE001 - as above
        if is_transient(exc):
            raise SourceError(f"cannot read {where}: {describe(exc)}") from None
        raise DatasetError(f"cannot read {where} ({describe(exc)}): upload the dataset again") from None
    table = load_table(io.BytesIO(data), where)
    refs = [_shard_ref(url, shard) for shard in info.shards]
    files = np.array([ref.url.encode() for ref in refs], dtype=np.bytes_)
    shards = remote_shards(url, refs, settings, root, cache_limit)
    return RemoteSplit(manifest, info, table, files, where, shards)


def remote_shards(dataset: str, refs: list[ShardRef], settings: dict[str, Any],
                  cache_dir: str | os.PathLike[str] | None = None, cache_limit: int | None = None) -> RemoteShards:
    """The shards `refs` read through the node cache at `cache_dir` (default: the user's), under
    the key `dataset` (its URL, or the folder of a dataset indexing shards elsewhere)."""
    root = claim_cache_dir(cache_dir)
    remove_stale_parts(root)  # downloads of processes that died: never finished, never counted again
    cache = ShardCache(root, dataset, resolve_limit(root, cache_limit), settings)
    return RemoteShards(cache, refs, log_start=cache.log_offset(), limit_from_disk=cache_limit is None)
