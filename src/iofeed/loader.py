"""`iofeed.loader(...)`: one loader interface over the backends, with framework adapters."""
from __future__ import annotations

import dataclasses
import os
import sys
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from .backends.base import Backend, Batch
from .errors import LoaderStateError, OptionError
from .image.boxes import Augment
from .order import OrderSpec
from .parallel import resolve_workers
from .prepare.scan import reason_kind
from .samples import SampleSource, open_source

FRAMEWORKS = ("numpy", "torch", "tf")
BACKENDS = ("auto", "workers", "dali")
ON_ERROR = ("skip", "raise")


@dataclass
class LoaderStats:
    """What the loader delivered and skipped, how long the consumer waited, and its settings."""

    images: int = 0
    batches: int = 0
    skipped: Counter = field(default_factory=Counter)  # reason kind -> count (includes the source scan)
    skipped_examples: list[str] = field(default_factory=list)  # first few "path: reason"
    wait_seconds: float = 0.0  # time the consumer spent waiting for the next batch
    settings: dict[str, Any] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        """Plain-JSON form."""
        return {
            "images": self.images,
            "batches": self.batches,
            "skipped": dict(self.skipped),
            "skipped_examples": list(self.skipped_examples),
            "wait_seconds": self.wait_seconds,
            "settings": dict(self.settings),
        }


class Loader:
    """Batches of one split for one rank. Iterate it once per epoch; `set_epoch` for DDP-style
    control (otherwise each full pass advances the epoch by itself)."""

    def __init__(self, source: SampleSource, order: OrderSpec, backend: Backend, adapter: Callable[[Batch], Any],
                 image_size: int, follow_group: bool = False) -> None:
        self.source, self.order, self.backend, self._adapter = source, order, backend, adapter
        self.image_size = image_size
        self._iteration: object | None = None  # token of the live iteration
        self._closed = False
        self._follow_group = follow_group  # rank and world_size from a process group started later
        self.epoch = 0
        self._position = 0  # batches of `epoch` already delivered
        self.last_indices = np.empty(0, np.int64)  # sample indices of the latest batch, for auditing
        self.stats = LoaderStats(skipped=Counter(source.rejected))
        self.stats.settings = {"samples": len(source), "rank": order.rank, "world_size": order.world_size,
                               "batch_size": order.batch_size, "image_size": image_size, **backend.describe()}

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
        token = self._iteration = object()
        stream = self.backend.run(epoch, batches, start, self.order.rank)
        while True:
            self._check_open()
            if self._iteration is not token:
                raise LoaderStateError("this loader was iterated again before this pass ended, and the newer "
                                       "iteration took over: use one iteration at a time")
            asked = time.perf_counter()
            try:
                batch = next(stream)
            except StopIteration:
                break
            self.stats.wait_seconds += time.perf_counter() - asked
            self._record(batch)
            self._position += 1
            if self._position == len(batches):  # complete once its last batch is out: a consumer that
                self.epoch, self._position = epoch + 1, 0  # stops after len() batches (Lightning) moves on
            yield self._adapter(batch)
        if start >= len(batches):  # nothing was left of this epoch
            self.epoch, self._position = epoch + 1, 0

    def _record(self, batch: Batch) -> None:
        self.last_indices = batch.indices
        self.stats.images += len(batch.indices)
        self.stats.batches += 1
        for index, reason in batch.skipped:
            self.stats.skipped[reason_kind(reason)] += 1
            if len(self.stats.skipped_examples) < 20:
                self.stats.skipped_examples.append(f"{self.source.path_of(index)}: {reason}")

    def state_dict(self) -> dict[str, Any]:
        """Where the loader is: resuming from it yields exactly the rest of the epoch."""
        o = self.order
        return {"epoch": self.epoch, "batches_done": self._position, "seed": o.seed, "samples": o.samples,
                "batch_size": o.batch_size, "rank": o.rank, "world_size": o.world_size}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Continue from `state_dict()` of a loader over the same data and settings."""
        mine = self.state_dict()
        for key in ("seed", "samples", "batch_size", "rank", "world_size"):
            if state.get(key) != mine[key]:
                raise OptionError(f"cannot resume: state has {key}={state.get(key)!r}, this loader {mine[key]!r}")
        if not 0 <= state["batches_done"] <= len(self):
            raise OptionError(f"cannot resume: batches_done={state['batches_done']} outside 0..{len(self)}")
        self.epoch, self._position = int(state["epoch"]), int(state["batches_done"])

    def _check_open(self) -> None:
        if self._closed:
            raise LoaderStateError.closed()

    def close(self) -> None:
        """Stop workers and free shared memory (idempotent); batches already taken stay valid."""
        self._closed = True
        self.backend.close()

    def __enter__(self) -> Loader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def distributed_rank_world() -> tuple[int, int]:
    """(rank, world_size) of an initialised torch.distributed group, else RANK/WORLD_SIZE, else (0, 1)."""
    dist = sys.modules.get("torch.distributed")
    if dist is not None and dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    if "RANK" in os.environ and "WORLD_SIZE" in os.environ:
        return int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    return 0, 1


def _choose(name: str, value: str, allowed: tuple[str, ...]) -> str:
    if value not in allowed:
        raise OptionError(f"{name}={value!r} is not one of {', '.join(allowed)}")
    return value


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
) -> Any:
    """A loader over an iofeed dataset or an image folder.

    Train augmentation (random-resized-crop 0.08–1, ratio 3/4–4/3, flip) by default for
    `split="train"`, resize + centre crop otherwise. `framework="numpy"` yields uint8 NHWC
    views and int64 labels; `"torch"` normalised NCHW channels_last tensors on `device`;
    `"tf"` returns a `tf.data.Dataset`.

    `workers=None` autotunes the workers engine (one worker at first, then the count that
    keeps the consumer from waiting, up to all cores; see `stats.settings["decisions"]`);
    an int fixes it. `prefetch` batches are made ahead (default: two per worker, at least 8),
    within `memory_budget` bytes of slots (default: a quarter of free RAM or /dev/shm).
    Breaking out of an epoch and iterating again continues it.

    `gpu_augment=True` (torch, workers engine, an iofeed dataset, best with `--format raw`):
    workers only gather each sample's stored pixels; the crop, resize and flip run on `device`.
    """
    _choose("framework", framework, FRAMEWORKS)
    _choose("backend", backend, BACKENDS)
    _choose("on_error", on_error, ON_ERROR)
    if image_size < 8:
        raise OptionError(f"image_size must be >= 8, got {image_size}")
    train = split == "train" if augment is None else bool(augment)
    data = open_source(source, split)
    follow_group = rank is None or world_size is None
    if follow_group:
        rank, world_size = distributed_rank_world()
    order = OrderSpec(len(data), batch_size, shuffle=split == "train",
                      drop_last=(split == "train") if drop_last is None else drop_last,
                      seed=seed, rank=rank, world_size=world_size)
    if gpu_augment and (framework != "torch" or backend == "dali"):
        raise OptionError("gpu_augment=True needs framework='torch' and the workers backend")
    engine = _make_backend("workers" if gpu_augment else backend, data, Augment(size=image_size, train=train),
                           batch_size, workers, prefetch, on_error, seed, device, memory_budget, gpu_augment)
    if framework == "torch":
        from .adapters.torch.adapter import TorchAdapter

        return Loader(data, order, engine, TorchAdapter(device, dtype, image_size), image_size, follow_group)
    from .adapters.numpy import to_numpy

    result = Loader(data, order, engine, to_numpy, image_size, follow_group)
    if framework == "tf":
        from .adapters.tf import to_tf_dataset

        return to_tf_dataset(result)
    return result


def _make_backend(name: str, data: SampleSource, augment: Augment, batch_size: int, workers: int | None,
                  prefetch: int | None, on_error: str, seed: int, device: Any, memory_budget: int | None,
                  packed: bool = False) -> Backend:
    count = resolve_workers(workers)
    if prefetch is not None and prefetch < 1:
        raise OptionError(f"prefetch must be >= 1, got {prefetch}")
    if name == "auto":
        from .backends.dali import dali_fits

        name = "dali" if dali_fits(device) and not data.has_raw() else "workers"
    if name == "dali" and data.has_raw():
        raise OptionError("backend='dali' decodes JPEGs, and this dataset holds raw pixels: use backend='workers' "
                          "(raw needs no decoding), or preprocess with --format jpeg for DALI")
    if name == "dali":  # `workers` is DALI's thread count; prefetch its queue depth
        from .backends.dali import DaliEngine

        return DaliEngine(data, augment, batch_size, count, 2 if prefetch is None else prefetch, on_error, seed, device)
    from .backends.workers.engine import make_worker_engine

    return make_worker_engine(data, augment, batch_size, workers, prefetch, on_error, seed, memory_budget, packed)
