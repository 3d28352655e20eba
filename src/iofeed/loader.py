"""`iofeed.loader(...)`: one loader interface over the backends, with framework adapters."""
from __future__ import annotations

import copy
import dataclasses
import itertools
import time
import warnings
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from .adapters.base import Adapter
from .adapters.registry import ADAPTERS
from .backends.base import Backend, Batch, BatchKey
from .backends.select import choice_notes, engine_name, make_engine
from .backends.skips import DEFAULT_MAX_SKIPPED, EpochSkips, check_scanned
from .errors import LoaderStateError
from .gpu.device import usable_device
from .manners import DataLoaderManners, check_dataloader_arguments
from .mix import Mix
from .mixsource import Mixture, check_state
from .options import LoaderOptions, distributed_rank_world
from .order import OrderSpec
from .prepare.scan import reason_kind
from .recipe import Recipe
from .remote.prefetch import NoPrefetch, Prefetcher, prefetcher_for
from .resume import Progress, fingerprint, parse
from .resume import state as resume_state
from .samples import SampleSource, open_source, read_from
from .statsfile import StatsWriter
from .targets import SampleTargets, open_targets


@dataclass
class LoaderStats:
    """What the loader delivered and skipped, how long the consumer waited, and its settings."""

    images: int = 0
    batches: int = 0
    skipped_batches: int = 0  # batches not delivered: every sample of them was skipped
    skipped: Counter = field(default_factory=Counter)  # reason kind -> count (includes the source scan)
    skipped_examples: list[str] = field(default_factory=list)  # first few "path: reason"
    wait_seconds: float = 0.0  # time the consumer spent waiting for the next batch
    fixed: dict[str, Any] = field(default_factory=dict)  # the loader's settings that do not change
    fetched: dict[str, float] = field(default_factory=dict)  # streamed datasets: shards, bytes, seconds downloaded
    live: Callable[[], dict[str, Any]] | None = field(default=None, repr=False)  # the engine's settings now
    transform_seconds: float = 0.0  # CPU time of the per-sample `transform=`, over `images` delivered
    transform_wall_seconds: float = 0.0  # wall time of the same calls (waits included)
    worker_cpu_seconds: float = 0.0  # CPU time of the workers engine's processes for the batches delivered
    copied_batches: int = 0  # batches copied out of engine memory: the consumer held all the engine could lend
    refilled: int = 0  # skipped samples whose places spare samples of the epoch took (full batches)
    sources: dict[str, dict[str, Any]] = field(default_factory=dict)  # a Mix: name -> delivered, skipped by reason

    @property
    def settings(self) -> dict[str, Any]:
        """The loader's settings as they are now: `fixed` and the engine's (`Backend.describe()`), so the
        worker count, prefetch depth and the autotuner's `decisions` (after_seconds, workers, reason)
        follow the autotuner; what `backend="auto"` chose comes first in `decisions`. A new dict at
        each read."""
        live = self.live() if self.live is not None else {}
        decisions = [*self.fixed.get("decisions", []), *live.get("decisions", [])]
        return {**self.fixed, **live, **({"decisions": decisions} if decisions else {})}

    @property
    def transform_ms_per_image(self) -> float | None:
        """Wall milliseconds the per-sample transform took per delivered image, its waits (I/O, locks,
        sleeps) included: what it holds a worker up (None without one)."""
        return self._per_image(self.transform_wall_seconds)

    @property
    def transform_cpu_ms_per_image(self) -> float | None:
        """CPU milliseconds of the same calls per delivered image (a busy machine does not inflate it)."""
        return self._per_image(self.transform_seconds)

    def _per_image(self, seconds: float) -> float | None:
        if not self.settings.get("transform") or not self.images:
            return None
        return 1000.0 * seconds / self.images

    def as_dict(self) -> dict[str, Any]:
        """Plain-JSON form."""
        return {
            "images": self.images,
            "batches": self.batches,
            "skipped_batches": self.skipped_batches,
            "skipped": dict(self.skipped),
            "skipped_examples": list(self.skipped_examples),
            "wait_seconds": self.wait_seconds,
            "settings": self.settings,
            "fetched": dict(self.fetched),
            "transform_seconds": self.transform_seconds,
            "worker_cpu_seconds": self.worker_cpu_seconds,
            "transform_wall_seconds": self.transform_wall_seconds,
            "copied_batches": self.copied_batches,
            "refilled": self.refilled,
            "transform_ms_per_image": self.transform_ms_per_image,
            "transform_cpu_ms_per_image": self.transform_cpu_ms_per_image,
            "sources": {name: {**s, "skipped": dict(s["skipped"])} for name, s in self.sources.items()},
        }


class Loader(DataLoaderManners):
    """Batches of one split for one rank. Iterate it once per epoch; `set_epoch` for DDP-style
    control (otherwise each full pass advances the epoch by itself). `len()` is the number of
    batches an epoch holds: skipped samples' places go to spare samples (`stats.refilled`)."""

    def __init__(self, source: SampleSource, order: OrderSpec, backend: Backend, adapter: Adapter,
                 options: LoaderOptions, targets: SampleTargets | None = None, mixture: Mixture | None = None) -> None:
        self.source, self.order, self.backend, self._adapter = source, order, backend, adapter
        self._targets = targets  # multi-hot labels and extras by sample index (None: class indices only)
        self.mixture = mixture  # an iofeed.Mix opened: its sources, per-source stats and skip bounds
        self.options = options
        self.image_size = options.image_size
        self._iteration: object | None = None  # token of the live iteration
        self._fetching: Prefetcher | NoPrefetch = NoPrefetch()  # the live iteration's downloads and pins
        self._closed = False
        self._follow_group = options.rank is None  # rank and world_size from a process group started later
        self.epoch = 0
        self._pass_start: tuple[int, int, int, int] | None = None  # where a pass left before its end began
        self._position = 0  # batches of `epoch` already delivered (counting those before a resume)
        self._done, self._first = 0, 0  # a resumed epoch: samples of its global order and batches done before
        self._identity = ""  # the source's fingerprint, made when a state first needs it
        self._skips: EpochSkips | None = None  # the skips of the epoch in progress, against max_skipped
        self._skips_at_start: tuple[Any, Any] = (None, None)  # those (and a Mix's) when the pass began
        self.last_indices = np.empty(0, np.int64)  # sample indices of the latest batch, for auditing
        self.stats = LoaderStats(skipped=Counter(source.rejected), live=backend.describe)
        self.stats.fixed = {"samples": len(source), "rank": order.rank, "world_size": order.world_size,
                            "batch_size": order.batch_size, "image_size": options.image_size}
        self._stats_file = StatsWriter.from_env()  # for `iofeed doctor`, when it traces this process

    def __len__(self) -> int:
        """Batches an epoch holds at most: a resumed epoch may hold more (those counted before the
        resume, and the rest cut to this loader's world and batch size), so that a consumer that
        takes `len()` once (Lightning) misses none of its batches."""
        self._join_group()
        if not self._done:
            return len(self.order)
        return max(len(self.order), self._first + self.order.batch_count(self._done))

    @property
    def spilling(self) -> bool:
        """Whether a resumed epoch holding more than a whole epoch's batches (a larger global batch
        after the resume) was left where a consumer that took `len()` before `load_state_dict`
        stops (Lightning): its rest comes at the next pass, and epoch hooks wait for it."""
        return (self._pass_start is not None and self._done > 0 and len(self) > len(self.order)
                and self._position >= len(self.order))

    def _join_group(self) -> None:
        """Take rank and world_size from torch.distributed once it is initialised, when they were
        not given: Lightning and other trainers start the process group after the loader is made."""
        if not self._follow_group or self._position > self._first:
            return
        rank, world_size = distributed_rank_world()
        if (rank, world_size) != (self.order.rank, self.order.world_size):
            self.order = dataclasses.replace(self.order, rank=rank, world_size=world_size)
            self.stats.fixed.update(rank=rank, world_size=world_size)

    def set_epoch(self, epoch: int) -> None:
        """Start `epoch` (from its beginning) at the next iteration."""
        self.epoch, self._position, self._done, self._first = int(epoch), 0, 0, 0
        self._pass_start = None

    def __iter__(self) -> Iterator[Any]:
        """One pass: after a whole pass, the next epoch; after `set_epoch` or `load_state_dict`,
        where they put it; after a pass left before its end (`break`, Lightning's sanity check,
        Keras peeking at a batch), that pass again from where it began, as torch's DataLoader
        starts a new pass at each `iter()`: an evaluation pass always covers its whole split."""
        self._check_open()
        if self._pass_start is not None and not self.spilling:
            self.epoch, self._done, self._first, self._position = self._pass_start
            self._restore_skips()  # the pass left early is read again: its skips must not count twice
        self._join_group()
        self._pass_start = (self.epoch, self._done, self._first, self._position)
        epoch, start = self.epoch, self._position
        batches = self.order.batches(epoch, self._done, self._first)
        following = self.order.batches(epoch + 1)  # what the next pass will ask for, unless moved
        token = self._iteration = object()
        self._fetching.close()  # an older iteration left suspended (tf, Lightning) holds no pins from now on
        fetching = self._fetching = prefetcher_for(self.source, batches, start,
                                                   lambda: following[:self.backend.starts_ahead])
        position = start  # batches of this pass's epoch delivered (self._position restarts when it completes)
        skips = self._skips
        if skips is None or skips.epoch != epoch or start == 0:  # a pass that continues an epoch keeps its count
            skips = self._skips = EpochSkips(epoch, sum(len(b) for b in batches), self.options.max_skipped,
                                             whole=start == 0)
            if self.mixture is not None:
                self.mixture.start_epoch(epoch, batches, self.options.max_skipped, whole=start == 0)
        self._skips_at_start = copy.deepcopy((skips, self.mixture.skips if self.mixture is not None else None))
        if self._stats_file is not None:
            self._stats_file.started()
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
                skips.add(batch, self.source.path_of)
                if self.mixture is not None:
                    self.mixture.check_skips(batch, self.source.path_of)
                if self._stats_file is not None:
                    self._stats_file.maybe_write(self._snapshot)
                batch.key = BatchKey(self.order.seed, epoch, self.order.rank, position)
                position += 1
                self._position = position
                if position == len(batches):  # complete once its last batch is out: a consumer that
                    skips.finish()
                    self.set_epoch(epoch + 1)  # stops after len() batches (Lightning) moves on
                    self._count_fetched()
                if len(batch.indices):  # an empty batch (all skipped) would be a NaN loss: only counted
                    held, batch = [batch], None
                    # no local keeps the delivered batch while this pass is suspended: its lease goes with
                    # the caller's last reference, also when a trainer keeps the iterator of a pass it left
                    yield self._deliver(held.pop())
                batch = None
            if start >= len(batches):  # nothing was left of this epoch
                self.set_epoch(epoch + 1)
        finally:
            fetching.close()

    def _restore_skips(self) -> None:
        """The epoch's skip counts (and a Mix's per source) as they were when the pass began."""
        skips, by_source = copy.deepcopy(self._skips_at_start)
        self._skips = skips
        if self.mixture is not None and by_source is not None:
            self.mixture.skips = by_source

    def repeat(self, epochs: int | None = None) -> Iterator[Any]:
        """Passes back to back, each the next epoch: endless (None), or `epochs` of them. For loops
        that count steps rather than epochs (jit-style JAX, tf.data's `repeat()`): `zip(range(steps),
        loader.repeat())` takes exactly `steps` batches, and `state_dict()` after any of them
        resumes exactly (`load_state_dict`, then `repeat()` again). A stream, not a pass: it
        continues from where the loader stands, also mid-epoch after an earlier `repeat()`."""
        self._pass_start = None  # continue a pass left early, rather than begin it again as iter() does
        passes = itertools.count() if epochs is None else range(epochs)
        for _ in passes:
            yield from self

    def _deliver(self, batch: Batch) -> Any:
        """The adapter's form of `batch`: multi-hot labels for `target="multi_hot"`, and with
        `extras=True` a third item, the list of the samples' extras."""
        if self._targets is None:
            return self._adapter(batch)
        if self.options.target == "multi_hot":
            batch = dataclasses.replace(batch, labels=self._targets.multi_hot(batch.indices))
        out = self._adapter(batch)
        return (*out, self._targets.extras_of(batch.indices)) if self.options.extras else out

    def _record(self, batch: Batch) -> None:
        if len(batch.indices):
            self.last_indices = batch.indices
            self.stats.images += len(batch.indices)
            self.stats.batches += 1
            self.stats.transform_seconds += batch.transform_seconds
            self.stats.transform_wall_seconds += batch.transform_wall_seconds
            self.stats.worker_cpu_seconds += batch.cpu_seconds
            self.stats.copied_batches += batch.copied
            self.stats.refilled += batch.refilled
        else:
            self.stats.skipped_batches += 1
        for index, reason in batch.skipped:
            self.stats.skipped[reason_kind(reason)] += 1
            if len(self.stats.skipped_examples) < 20:
                self.stats.skipped_examples.append(f"{self.source.path_of(index)}: {reason}")
        if self.mixture is not None:
            self.mixture.record(batch, self.stats.sources)

    def state_dict(self) -> dict[str, Any]:
        """Where the run is, as a small plain dict (ints and strings): the dataset's identity, the
        order's settings, the epoch and how many samples of its global order are done. It is the
        same on every rank (all ranks deliver batches in step), and `load_state_dict` continues
        from it on any world size, batch size, worker count or engine."""
        o = self.order
        done = min(self._done + (self._position - self._first) * o.batch_size * o.world_size, o.samples)
        out = resume_state(self._fingerprint(), o, Progress(self.epoch, done, self._position))
        return out if self.mixture is None else {**out, "mixture": self.mixture.state(o, self.epoch, done)}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Continue from `state_dict()` of a loader over the same data, seed and shuffle: the rest of
        the epoch's global order is shared out among this loader's ranks (each sample exactly once,
        apart from padding to equal batches). OptionError naming the key when the state is
        malformed or of other data or settings."""
        check_state(state, self.mixture)  # names what differs between two mixtures
        progress = parse({k: v for k, v in state.items() if k != "mixture"} if isinstance(state, dict) else state,
                         self._fingerprint(), self.order)
        if self.mixture is not None:
            self.mixture.check_positions(state["mixture"], self.order, progress.epoch, progress.samples_done)
        self.epoch, self._done = progress.epoch, progress.samples_done
        self._position = self._first = progress.batches_done
        self._pass_start = None  # the next pass resumes from here
        self._join_group()
        if len(self) > len(self.order):
            warnings.warn(f"the resumed epoch holds {len(self)} batches (counting {self._first} done before the "
                          f"resume), more than a whole epoch's {len(self.order)}: a trainer that takes len() once "
                          "(Lightning) stops it early, and the next pass continues it", UserWarning, stacklevel=2)

    def _fingerprint(self) -> str:
        if not self._identity:
            self._identity = fingerprint(self.source) if self.mixture is None else self.mixture.identity()
        return self._identity

    def _snapshot(self) -> dict[str, Any]:
        """The stats as plain JSON, with the workers taking tasks now."""
        return {**self.stats.as_dict(), "workers": self.backend.describe().get("workers")}

    def _count_fetched(self) -> None:
        """Update `stats.fetched` from the node's fetch log (streamed datasets)."""
        if self.source.remote is not None:
            self.stats.fetched = self.source.remote.fetched()
        if self.mixture is not None:
            self.mixture.count_fetched(self.stats.sources)

    def _check_open(self) -> None:
        if self._closed:
            raise LoaderStateError.closed()

    def close(self) -> None:
        """Stop workers and free shared memory (idempotent); batches already taken stay valid."""
        if not self._closed:
            self._count_fetched()
            if self._stats_file is not None:
                self._stats_file.write(self._snapshot())
        self._closed = True
        self._fetching.close()
        getattr(self._adapter, "close", lambda: None)()  # an adapter holding engine memory (CUDA pinning) first
        self.backend.close()

    def __enter__(self) -> Loader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def loader(
    source: str | Path | Mix,
    *,
    split: str = "train",
    batch_size: int,
    image_size: int | None = None,
    augment: bool | str | Recipe | None = None,
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
    shuffle: str | bool | None = None,
    block_shards: int = 8,
    cache_dir: str | Path | None = None,
    cache_limit: int | None = None,
    target: str = "class",
    extras: bool = False,
    max_skipped: float | None = DEFAULT_MAX_SKIPPED,
    transform: Any = None,
    batch_transform: Any = None,
    sharding: Any = None,
    memory_format: str | None = None,
    pin_memory: bool | None = None,
    persistent_workers: bool | None = None,
    prefetch_factor: Any = None,
    collate_fn: Any = None,
    generator: Any = None,
) -> Any:
    """A loader over an iofeed dataset or an image folder: a `Loader` (numpy, torch) or a
    `tf.data.Dataset` (tf). Every argument is checked before any work starts; a bad one raises a
    one-line `OptionError`.

    Args:
        source: an iofeed dataset (made by `iofeed preprocess`; a path, or a URL: see below) or a
            folder with one subfolder per class (Caltech-256 layout accepted), or an `iofeed.Mix` of
            them, weighted (docs/formats.md, "Mixtures"; `stats.sources` counts per source).
        split: the dataset's split to read ("train", "val"); an image folder has one split, read
            whatever the name. `"train"` is shuffled each epoch (see `shuffle`); others are read in order.
        batch_size: samples per batch (an int >= 1). With `drop_last`, it may not exceed the
            samples of the split on this rank (that would be no batch at all).
        image_size: side of the square output images in pixels (an int >= 8). Default: the
            recipe's (`Recipe.from_timm`), else 224.
        augment: the built-in steps, an `iofeed.Recipe` or a preset name: "imagenet" (the default:
            random-resized crop of area 0.08–1 and ratio 3/4–4/3, horizontal flip, bilinear,
            ImageNet mean/std; evaluation: centre crop of 0.875), "finetune" (area 0.35–1),
            "timm" (bicubic), "inception" (bicubic, mean = std = 0.5) or "uint8" (no
            normalisation). `Recipe(scale=, ratio=, flip=, crop_fraction=, interpolation=
            "bilinear"|"bicubic"|"area", mean=, std=, normalize=, train=)` sets each step; True
            and False force the random crop or the centre crop; None (default) augments the
            train split only. Every engine does every step or refuses it naming the one that
            can ("area": workers only; `gpu_augment`: bilinear only).
        framework: "numpy" yields (uint8 NHWC arrays, int64 labels) — views of shared memory that
            stay as delivered while you hold them (kept past the pool: copies, counted in
            `stats.copied_batches`); "torch" yields normalised (the recipe's mean/std, else
            ImageNet's) NCHW tensors (see `memory_format`) and int64 labels on `device`; "tf"
            returns a `tf.data.Dataset` (`dataset.iofeed_loader` is the Loader) of float32 NHWC
            images, 0-255 as Keras' `image_dataset_from_directory` gives them unless the recipe
            has mean/std; "jax" yields `jax.Array`s, NHWC images (normalised float32 by default)
            and int32 labels, sharded over the batch axis (see `sharding`); "keras" what
            `model.fit` takes on Keras' backend (float32 0-255 NHWC like "tf"; `take`/`repeat`
            on every backend). With
            `normalize=False` in the recipe, torch and tf hand out uint8 images.
        device: where batches end up: None or "cpu", "cuda", "cuda:N", an ordinal or a
            `torch.device`. The DALI engine decodes there; the torch adapter copies there. A CUDA
            device this process cannot see (no GPU) is refused at once: pass "cpu".
        dtype: floating-point torch dtype of the images (default float32; float16/bfloat16 are computed in
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
            A skipped sample's place goes to a spare sample (the rank's later ones, counted in
            `stats.refilled`), so every rank delivers `len(loader)` full batches (a batch that
            runs out of spares stays short, or is not delivered: `stats.skipped_batches`). An
            evaluation split that deals each sample once takes no spares: the batch stays short.
        max_skipped: the share of an epoch's samples (on this rank) that may be skipped, a fraction
            in 0..1 (default 0.05; 0: any skip raises). Past it, or when an epoch delivers no batch,
            a `SampleError` gives the counts by reason and the first files; for a folder, files
            its scan rejected inside class folders are held to it when the loader is made. None:
            skips are counted, never raised.
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
            other splits); True and False (as torch's DataLoader takes them) mean that default
            of the train split, and "none". Every order is a function of (seed, epoch, rank, world_size).
        block_shards: shards per block of `shuffle="block"` (an int >= 1).
        cache_dir: the node-local cache of a streamed dataset, shared by every rank of the node
            (default `IOFEED_CACHE`, else ~/.cache/iofeed): a new or empty folder, or one iofeed
            marked as its cache (a non-empty folder without the mark is refused); ignored for local paths.
        cache_limit: bytes the cache may hold (an int >= 1; default: what it holds plus the free
            disk less max(2 GiB, 5% of the free disk)); it must hold the shards the order keeps live.
        target: "class" (int64 class indices) or "multi_hot" (float32 (batch, classes) vectors, 1
            for each class of a multi-label sample; a single-label dataset gives one-hot rows).
        extras: with True each batch is (images, labels, extras), `extras` the list of the
            samples' extra JSON values (None where a sample has none), as the dataset stores them
            (`json` members: WebDataset json, labels-file columns). Not with framework="tf".
        transform: your own per-sample augmentation, run in the worker processes on each
            image after iofeed's crop and resize: `transform(image)` with `image` uint8 HWC
            (numpy), returning uint8 or float32 HWC with 3 channels (a torch tensor: CHW, as
            torchvision returns it) of one fixed shape, probed on a first image. A torchvision v2
            transform (start it with `v2.ToImage()`), an albumentations `Compose` (called as
            `t(image=...)`, seeded through `set_random_seed`) or a function. It must be
            picklable and importable: a lambda, or a function defined in `__main__`, is refused.
            Before each call Python's `random`, numpy's global RNG and torch's RNG are seeded
            from (seed, epoch, rank, batch, position), and a callable with an `rng` parameter
            gets a seeded `numpy.random.Generator`: the same pixels whatever the worker count,
            and exact resume. A transform that raises follows `on_error` (skipped and counted
            under "transform NAME raised ...", or a `SampleError` naming the file). uint8
            output is normalised by the adapter; float32 output is handed over as it is. Its
            wall time per image is `stats.transform_ms_per_image` (CPU time:
            `stats.transform_cpu_ms_per_image`). Workers engine only (`backend="auto"`
            picks it; "dali" and `gpu_augment` refuse it).
        batch_transform: your own per-batch step `(images, labels) -> (images, labels)`, run in
            this process on each batch where it ends up (on `device`, after normalisation):
            torchvision v2 `MixUp`/`CutMix` (labels become soft), kornia on GPU tensors, or for
            `framework="tf"` a function of tf tensors, run inside the dataset's `.map` (it may
            take `seed=`, a stateless-RNG seed tensor). Seeded per batch from (seed, epoch, rank,
            batch) — torch's, numpy's and Python's RNGs, restored after the call — and given
            `rng=` when it takes one. It returns `(images, labels)` of the batch's length (else
            an OptionError naming it). Any engine.
        sharding: with `framework="jax"`, the `jax.sharding.Sharding` of each batch (default: a
            `NamedSharding` splitting the batch axis over every device, `PartitionSpec("batch")`).
            Under `jax.distributed` each process loads `batch_size` samples of its own share and
            the arrays are the global batch of `batch_size * jax.process_count()` rows.
        memory_format: with `framework="torch"`, "contiguous" (the default: plain NCHW, what a
            model in PyTorch's default format expects; DDP warns "Grad strides do not match
            bucket view strides" otherwise) or "channels_last" (NHWC memory: pays with the model
            converted too, `model.to(memory_format=torch.channels_last)`, under AMP on a GPU).
        pin_memory, persistent_workers: torch DataLoader's, accepted and ignored: copies to CUDA
            already go through pinned buffers, and the workers live as long as the loader.
        prefetch_factor, collate_fn, generator: torch DataLoader's; anything but None is refused
            naming iofeed's own option (`prefetch=`, `batch_transform=`, `seed=`).

    `source` may also be the s3://, gs:// or http(s):// URL of an iofeed dataset (`pip install
    'iofeed[s3]'`, `[gcs]`, `[http]`; credentials and endpoint the standard way): its shards are
    fetched whole, ahead of decoding, into `cache_dir`, and each is checked against the size and
    sha256 its manifest records. A shard that cannot be fetched after retries raises, or with
    `on_error="skip"` its samples are skipped and counted; `stats.fetched` sums the node's
    downloads since the dataset was opened.

    Each `iter()` is a new pass, as with torch's DataLoader: breaking out of an epoch and
    iterating again starts that epoch again from its first batch (an evaluation split is always
    read whole); `state_dict()` and `load_state_dict()` resume exactly, also on another world size, batch size or engine
    (docs/distributed.md); `close()` (or `with`) frees processes and memory.
    """
    check_dataloader_arguments(pin_memory, persistent_workers, prefetch_factor, collate_fn, generator)
    options = LoaderOptions(
        batch_size=batch_size, split=split, image_size=image_size, augment=augment, framework=framework,
        device=usable_device(device), dtype=dtype, backend=backend, workers=workers, prefetch=prefetch, seed=seed,
        rank=rank, world_size=world_size, drop_last=drop_last, on_error=on_error, memory_budget=memory_budget,
        gpu_augment=gpu_augment, shuffle=shuffle, block_shards=block_shards, cache_dir=cache_dir,
        cache_limit=cache_limit, target=target, extras=extras, max_skipped=max_skipped, transform=transform,
        batch_transform=batch_transform, sharding=sharding, memory_format=memory_format,
    )
    adapter = ADAPTERS[framework].load().from_options(options)  # imports the framework now, not before
    mixture = Mixture(source, split, options) if isinstance(source, Mix) else None
    data = mixture.data if mixture else open_source(source, split, cache_dir=options.cache_dir,
                                                    cache_limit=options.cache_limit)
    check_scanned(data.rejected, len(data), options.max_skipped, str(source))
    order = mixture.order(options) if mixture else options.order(len(data), shard_of=data.file_id,
                                                                 streamed=data.remote is not None)
    if data.remote is not None:
        data.remote.fit_order(order, readers=options.workers or 1)
    targets = None
    if target != "class" or extras:
        targets = mixture.targets() if mixture else open_targets(source, split, data)
    loaded = Loader(data, order, make_engine(options, data), adapter, options, targets, mixture)
    loaded.stats.fixed["decisions"] = choice_notes(options, engine_name(options, data), data)  # what "auto" decided
    read = read_from(source) if mixture is None else [read_from(name) for name in mixture.names]
    loaded.stats.fixed["source"] = read  # what `iofeed doctor` checks: the data really read
    return adapter.wrap(loaded)
