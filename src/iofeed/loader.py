"""`iofeed.loader(...)`: one loader interface over the backends, with framework adapters."""
from __future__ import annotations

import dataclasses
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from .adapters.base import Adapter
from .adapters.registry import ADAPTERS
from .backends.base import Backend, Batch
from .backends.select import make_engine
from .device import loader_device
from .errors import LoaderStateError, OptionError
from .options import LoaderOptions, distributed_rank_world
from .order import OrderSpec
from .prepare.scan import reason_kind
from .remote.prefetch import NoPrefetch, Prefetcher, prefetcher_for
from .samples import SampleSource, open_source


@dataclass
class LoaderStats:
    """What the loader delivered and skipped, how long the consumer waited, and its settings."""

    images: int = 0
    batches: int = 0
    skipped_batches: int = 0  # batches not delivered: every sample of them was skipped
    skipped: Counter = field(default_factory=Counter)  # reason kind -> count (includes the source scan)
    skipped_examples: list[str] = field(default_factory=list)  # first few "path: reason"
    wait_seconds: float = 0.0  # time the consumer spent waiting for the next batch
    settings: dict[str, Any] = field(default_factory=dict)
    fetched: dict[str, float] = field(default_factory=dict)  # streamed datasets: shards, bytes, seconds downloaded

    def as_dict(self) -> dict[str, Any]:
        """Plain-JSON form."""
        return {
            "images": self.images,
            "batches": self.batches,
            "skipped_batches": self.skipped_batches,
            "skipped": dict(self.skipped),
            "skipped_examples": list(self.skipped_examples),
            "wait_seconds": self.wait_seconds,
            "settings": dict(self.settings),
            "fetched": dict(self.fetched),
        }


class Loader:
    """Batches of one split for one rank. Iterate it once per epoch; `set_epoch` for DDP-style
    control (otherwise each full pass advances the epoch by itself). `len()` is the number of
    batches an epoch holds at most: a batch whose samples were all skipped is not delivered."""

    def __init__(self, source: SampleSource, order: OrderSpec, backend: Backend, adapter: Adapter,
                 options: LoaderOptions) -> None:
        self.source, self.order, self.backend, self._adapter = source, order, backend, adapter
        self.options = options
        self.image_size = options.image_size
        self._iteration: object | None = None  # token of the live iteration
        self._fetching: Prefetcher | NoPrefetch = NoPrefetch()  # the live iteration's downloads and pins
        self._closed = False
        self._follow_group = options.rank is None  # rank and world_size from a process group started later
        self.epoch = 0
        self._position = 0  # batches of `epoch` already delivered
        self.last_indices = np.empty(0, np.int64)  # sample indices of the latest batch, for auditing
        self.stats = LoaderStats(skipped=Counter(source.rejected))
        self.stats.settings = {"samples": len(source), "rank": order.rank, "world_size": order.world_size,
                               "batch_size": order.batch_size, "image_size": options.image_size,
                               **backend.describe()}

    def __len__(self) -> int:
        self._join_group()
        return len(self.order)

    def _join_group(self) -> None:
        """Take rank and world_size from torch.distributed once it is initialised, when they were
        not given: Lightning and other trainers start the process group after the loader is made."""
        if not self._follow_group or self._position:
            return
        rank, world_size = distributed_rank_world()
        if (rank, world_size) != (self.order.rank, self.order.world_size):
            self.order = dataclasses.replace(self.order, rank=rank, world_size=world_size)
            self.stats.settings.update(rank=rank, world_size=world_size)

    def set_epoch(self, epoch: int) -> None:
        """Start `epoch` (from its beginning) at the next iteration."""
        self.epoch, self._position = int(epoch), 0

    def __iter__(self) -> Iterator[Any]:
        self._check_open()
        self._join_group()
        epoch, start = self.epoch, self._position
        batches = self.order.batches(epoch)
        following = self.order.batches(epoch + 1)  # what the next pass will ask for, unless moved
        token = self._iteration = object()
        self._fetching.close()  # an older iteration left suspended (tf, Lightning) holds no pins from now on
        fetching = self._fetching = prefetcher_for(self.source, batches, start,
                                                   lambda: following[:self.backend.starts_ahead])
        position = start  # batches of this pass's epoch delivered (self._position restarts when it completes)
        try:
            stream = self.backend.run(epoch, batches, start, self.order.rank, following)
            while True:
                self._check_open()
                if self._iteration is not token:
                    raise LoaderStateError("this loader was iterated again before this pass ended, and the newer "
                                           "iteration took over: use one iteration at a time")
                fetching.advance(position)
                asked = time.perf_counter()
                try:
                    batch = next(stream)
                except StopIteration:
                    break
                self.stats.wait_seconds += time.perf_counter() - asked
                self._record(batch)
                position += 1
                self._position = position
                if position == len(batches):  # complete once its last batch is out: a consumer that
                    self.epoch, self._position = epoch + 1, 0  # stops after len() batches (Lightning) moves on
                    self._count_fetched()
                if len(batch.indices):  # an empty batch (all skipped) would be a NaN loss: only counted
                    yield self._adapter(batch)
            if start >= len(batches):  # nothing was left of this epoch
                self.epoch, self._position = epoch + 1, 0
        finally:
            fetching.close()

    def _record(self, batch: Batch) -> None:
        if len(batch.indices):
            self.last_indices = batch.indices
            self.stats.images += len(batch.indices)
            self.stats.batches += 1
        else:
            self.stats.skipped_batches += 1
        for index, reason in batch.skipped:
            self.stats.skipped[reason_kind(reason)] += 1
            if len(self.stats.skipped_examples) < 20:
                self.stats.skipped_examples.append(f"{self.source.path_of(index)}: {reason}")

    def state_dict(self) -> dict[str, Any]:
        """Where the loader is: resuming from it yields exactly the rest of the epoch."""
        o = self.order
        return {"epoch": self.epoch, "batches_done": self._position, "seed": o.seed, "samples": o.samples,
                "batch_size": o.batch_size, "rank": o.rank, "world_size": o.world_size, "shuffle": o.shuffle,
                "block_shards": o.block_shards}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Continue from `state_dict()` of a loader over the same data and settings."""
        mine = self.state_dict()
        for key in ("seed", "samples", "batch_size", "rank", "world_size", "shuffle", "block_shards"):
            if key in state and state[key] != mine[key]:  # a state from before shuffle modes has none
                raise OptionError(f"cannot resume: state has {key}={state.get(key)!r}, this loader {mine[key]!r}")
        if not 0 <= state["batches_done"] <= len(self):
            raise OptionError(f"cannot resume: batches_done={state['batches_done']} outside 0..{len(self)}")
        self.epoch, self._position = int(state["epoch"]), int(state["batches_done"])

    def _count_fetched(self) -> None:
        """Update `stats.fetched` from the node's fetch log (streamed datasets)."""
        if self.source.remote is not None:
            self.stats.fetched = self.source.remote.fetched()

    def _check_open(self) -> None:
        if self._closed:
            raise LoaderStateError.closed()

    def close(self) -> None:
        """Stop workers and free shared memory (idempotent); batches already taken stay valid."""
        if not self._closed:
            self._count_fetched()
        self._closed = True
        self._fetching.close()
        self.backend.close()

    def __enter__(self) -> Loader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def loader(
    source: str | Path,
    *,
    split: str = "train",
    batch_size: int,
    image_size: int = 224,
    augment: bool | None = None,
    framework: str = "numpy",
    device: Any = None,
    dtype: Any = None,
    backend: str = "auto",
    workers: int | None = None,
    prefetch: int | None = None,
    seed: int = 0,
    rank: int | None = None,
    world_size: int | None = None,
    drop_last: bool | None = None,
    on_error: str = "skip",
    memory_budget: int | None = None,
    gpu_augment: bool = False,
    shuffle: str | None = None,
    block_shards: int = 8,
    cache_dir: str | Path | None = None,
    cache_limit: int | None = None,
    sharding: Any = None,
) -> Any:
    """A loader over an iofeed dataset or an image folder: a `Loader` (numpy, torch) or a
    `tf.data.Dataset` (tf). Every argument is checked before any work starts; a bad one raises a
    one-line `OptionError`.

    Args:
        source: an iofeed dataset (made by `iofeed preprocess`; a path, or a URL: see below) or a
            folder with one subfolder per class (Caltech-256 layout accepted).
        split: the dataset's split to read ("train", "val"); an image folder has one split, read
            whatever the name. `"train"` is shuffled each epoch (see `shuffle`); others are read in order.
        batch_size: samples per batch (an int >= 1). With `drop_last`, it may not exceed the
            samples of the split on this rank (that would be no batch at all).
        image_size: side of the square output images in pixels (an int >= 8).
        augment: random-resized crop (area 0.08–1, ratio 3/4–4/3) and horizontal flip when True,
            resize + centre crop (0.875) when False. Default: True for `split="train"` only.
        framework: "numpy" yields (uint8 NHWC views, int64 labels) — views valid until the next
            batch; "torch" yields normalised (ImageNet mean/std) NCHW channels_last tensors and
            int64 labels on `device`; "tf" returns a `tf.data.Dataset` of normalised float32
            NHWC images (`dataset.iofeed_loader` is the Loader); "jax" yields `jax.Array`s, NHWC
            images (normalised float32 by default) and int32 labels, sharded over the batch axis
            (see `sharding`).
        device: where batches end up: None or "cpu", "cuda", "cuda:N", an ordinal or a
            `torch.device`. The DALI engine decodes there; the torch adapter copies there.
        dtype: torch dtype of the images (default float32; float16/bfloat16 are computed in
            float32 and rounded once). For `framework="jax"`: "float32" (default), "bfloat16"
            (normalised) or "uint8" (as decoded), as a name or a numpy/JAX dtype.
        backend: "workers" (CPU processes), "dali" (NVIDIA DALI; JPEG datasets and folders only)
            or "auto": DALI when `device` is a CUDA device, a GPU is present and DALI is
            installed and can read the source, else workers.
        workers: worker processes (workers engine) or threads (DALI). None autotunes the workers
            engine: one worker at first, then the count that keeps the consumer from waiting, up
            to the usable cores — CPU affinity and cgroup quota, shared among the node's local ranks
            (`LOCAL_WORLD_SIZE`); see `stats.settings["decisions"]` and `["cores_because"]`; for
            DALI, the usable cores.
        prefetch: batches made ahead (an int >= 1). Default: two per worker, at least 8 (workers
            engine, within `memory_budget`); 2 for DALI.
        seed: seed of the shuffle and of the augmentation (an int >= 0): the order and the
            crops are a function of (seed, epoch, rank, batch), whatever the engine or workers.
        rank, world_size: this process's share of each epoch (pass both, or neither): every
            rank gets the same number of batches, disjoint but for padding. Default: from an
            initialised torch.distributed group, else an initialised jax.distributed (process index
            and count), else RANK/WORLD_SIZE, else (0, 1).
        drop_last: drop each rank's last incomplete batch. Default: True for `split="train"`.
        on_error: "skip" a sample that cannot be read (counted in `stats.skipped`, with the
            first few paths in `stats.skipped_examples`), or "raise" a `SampleError` naming it.
            A batch whose samples were all skipped is not delivered (counted in
            `stats.skipped_batches`): `len(loader)` is the number of batches at most.
        memory_budget: bytes of memory for the workers engine's batch slots (an int >= 1;
            anonymous shared memory, not limited by /dev/shm). Default: a quarter of the memory
            this process may use (available RAM, capped by the cgroup limit), shared among local
            ranks; see `stats.settings["memory_because"]`.
        gpu_augment: with `framework="torch"`, the workers engine and an iofeed dataset (best
            made with `--format raw`): workers only gather each sample's stored pixels; the crop,
            resize and flip run on `device`.

        shuffle: the epoch order: "global" (a permutation of all samples; the default for the
            train split of a local dataset or folder), "block" (the default for a streamed train
            split: shards in a shuffled order, samples shuffled within blocks of `block_shards`
            shards, so that only two blocks are live at a time) or "none" (the default for
            other splits). Every order is a function of (seed, epoch, rank, world_size).
        block_shards: shards per block of `shuffle="block"` (an int >= 1).
        cache_dir: the node-local cache of a streamed dataset, shared by every rank of the node
            (default `IOFEED_CACHE`, else ~/.cache/iofeed); ignored for local paths.
        cache_limit: bytes the cache may hold (an int >= 1; default: what it holds plus the free
            disk above a 10% reserve); it must hold the shards the order keeps live.
        sharding: with `framework="jax"`, the `jax.sharding.Sharding` of each batch (default: a
            `NamedSharding` splitting the batch axis over every device, `PartitionSpec("batch")`).
            Under `jax.distributed` each process loads `batch_size` samples of its own share and
            the arrays are the global batch of `batch_size * jax.process_count()` rows.

    `source` may also be the s3://, gs:// or http(s):// URL of an iofeed dataset (`pip install
    'iofeed[s3]'`, `[gcs]`, `[http]`; credentials and endpoint the standard way): its shards are
    fetched whole, ahead of decoding, into `cache_dir`, and each is checked against the size and
    sha256 its manifest records. A shard that cannot be fetched after retries raises, or with
    `on_error="skip"` its samples are skipped and counted; `stats.fetched` sums the node's
    downloads since the dataset was opened.

    Breaking out of an epoch and iterating again continues it; `state_dict()` and
    `load_state_dict()` resume exactly; `close()` (or `with`) frees processes and memory.
    """
    options = LoaderOptions(
        batch_size=batch_size, split=split, image_size=image_size, augment=augment, framework=framework,
        device=loader_device(device), dtype=dtype, backend=backend, workers=workers, prefetch=prefetch, seed=seed,
        rank=rank, world_size=world_size, drop_last=drop_last, on_error=on_error, memory_budget=memory_budget,
        gpu_augment=gpu_augment, shuffle=shuffle, block_shards=block_shards, cache_dir=cache_dir,
        cache_limit=cache_limit, sharding=sharding,
    )
    adapter = ADAPTERS[framework].load().from_options(options)  # imports the framework now, not before
    data = open_source(source, split, cache_dir=options.cache_dir, cache_limit=options.cache_limit)
    order = options.order(len(data), shard_of=data.file_id, streamed=data.remote is not None)
    if data.remote is not None:
        data.remote.fit_order(order)
    return adapter.wrap(Loader(data, order, make_engine(options, data), adapter, options))
