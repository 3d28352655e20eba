"""`Loader`: the batches of one split for one rank, epoch after epoch, with resume and stats."""
from __future__ import annotations

import copy
import dataclasses
import itertools
import time
import warnings
from collections import Counter
from collections.abc import Iterator
from typing import Any, Generic, TypeVar

import numpy as np

from .adapters.base import Adapter
from .backends.base import Backend, Batch, BatchKey
from .backends.skips import EpochSkips
from .errors import LoaderStateError
from .loader_stats import LoaderStats
from .manners import DataLoaderManners
from .mixsource import Mixture, check_state
from .options import LoaderOptions
from .order import OrderSpec
from .prepare.scan import reason_kind
from .remote.prefetch import NoPrefetch, Prefetcher, prefetcher_for
from .resume import Progress, fingerprint, parse
from .resume import state as resume_state
from .samples import SampleSource
from .statsfile import StatsWriter
from .targets import SampleTargets

BatchT = TypeVar("BatchT")  # what one iteration step yields: (images, labels[, extras]) of the framework


class Loader(DataLoaderManners, Generic[BatchT]):
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
        self._follow_group = options.follows_group  # rank and world_size from a process group started later
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
        rank, world_size = self.options.placement()
        if (rank, world_size) != (self.order.rank, self.order.world_size):
            self.order = dataclasses.replace(self.order, rank=rank, world_size=world_size)
            self.stats.fixed.update(rank=rank, world_size=world_size)

    def set_epoch(self, epoch: int) -> None:
        """Start `epoch` (from its beginning) at the next iteration."""
        self.epoch, self._position, self._done, self._first = int(epoch), 0, 0, 0
        self._pass_start = None

    def __iter__(self) -> Iterator[BatchT]:
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
            skips = self._skips = EpochSkips(epoch, sum(len(b) for b in batches), self.options.skips.max_skipped,
                                             whole=start == 0)
            if self.mixture is not None:
                self.mixture.start_epoch(epoch, batches, self.options.skips.max_skipped, whole=start == 0)
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

    def repeat(self, epochs: int | None = None) -> Iterator[BatchT]:
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

    def __enter__(self) -> Loader[BatchT]:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
