"""Reading a mixture that holds streamed sources: one `RemoteShards`-like view over the mixture's
files, each file id routed to its source's node cache, or opened in place for a local source."""
from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

from ..errors import OptionError
from ..format.files import open_regular
from .remote.cache import ShardCache, ShardRef
from .remote.dataset import GLOBAL_OPEN_SHARDS, RemoteShards

if TYPE_CHECKING:
    import threading

    from .order import OrderSpec
    from .samples import SampleSource


@dataclass
class MixedRemote:
    """What readers and the prefetcher ask of a streamed dataset (`acquire`, `refs`, `cache`,
    `open_limit`), over a mixture's files: streamed ones through their source's cache, local ones
    opened in place (checked against their dataset), with no bytes to fetch. Pickled into workers."""

    parts: list[RemoteShards | None]  # each source's shards (None: local)
    shells: list[SampleSource]  # each source without its samples, for `check_unchanged`
    files: np.ndarray  # every file of the mixture
    file_part: np.ndarray  # each file's source
    file_base: np.ndarray  # each source's first file id
    open_limit: int = GLOBAL_OPEN_SHARDS
    refs: list[ShardRef] = field(default_factory=list)  # each file's ref; a local file's has no bytes to fetch

    def __post_init__(self) -> None:
        for k, name in enumerate(self.files):
            part = self.parts[int(self.file_part[k])]
            self.refs.append(part.refs[k - int(self.file_base[self.file_part[k]])] if part is not None
                             else ShardRef(name.decode("utf-8", "surrogateescape"), 0))

    @property
    def streamed(self) -> list[RemoteShards]:
        return [p for p in self.parts if p is not None]

    @property
    def cache(self) -> ShardCache:  # the retry budget and the limit of the node cache they share
        return self.streamed[0].cache

    @property
    def largest(self) -> int:
        return max(p.largest for p in self.streamed)

    def acquire(self, file_id: int, cancel: threading.Event | None = None) -> int:
        """A descriptor of file `file_id`: a leased cached copy, or the local file itself."""
        k = int(self.file_part[file_id])
        part = self.parts[k]
        if part is not None:
            return part.acquire(file_id - int(self.file_base[k]), cancel)
        fd = open_regular(self.files[file_id])
        try:
            self.shells[k].check_unchanged(file_id)
        except BaseException:
            os.close(fd)
            raise
        return fd

    def fetched_by_source(self) -> list[dict[str, float] | None]:
        """Each source's downloads on this node since it was opened (None: a local source)."""
        return [p.fetched() if p is not None else None for p in self.parts]

    def fetched(self) -> dict[str, float]:
        """Downloads of the streamed sources on this node since they were opened, summed."""
        each = [p.fetched() for p in self.streamed]
        return {key: round(sum(f[key] for f in each), 3) for key in ("shards", "bytes", "seconds")}

    def fit_order(self, order: OrderSpec, readers: int = 1) -> None:
        """Check that the shared cache holds what the mixture keeps live of its streamed sources: each
        whole where it is read by a global permutation, two blocks of `block_shards` shards where it
        is read block-wise, two shards where it is read in order; never more shards than it has (as
        for one streamed dataset: `RemoteShards.fit_order`)."""
        kinds = order.plan.kinds if order.plan is not None else [order.shuffle] * len(self.parts)
        need = 0
        for part, kind in zip(self.parts, kinds):
            if part is not None:
                live = {"block": 2 * order.block_shards, "none": 2}.get(kind, len(part.refs))
                need += min(min(live, len(part.refs)) * part.largest, sum(ref.bytes for ref in part.refs))
        if self.cache.limit < need:
            raise OptionError(f"Cache.limit={self.cache.limit:,} bytes cannot hold the {need:,} bytes this Mix keeps "
                              f"live of its streamed sources (each whole under shuffle='global', two blocks of "
                              f"Order.block_shards={order.block_shards} shards under 'block'): raise Cache.limit, or "
                              "leave shuffle out (streamed sources block-wise)")
        self.open_limit = GLOBAL_OPEN_SHARDS
