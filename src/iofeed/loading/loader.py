"""`Loader`: the batches of one split for one rank, epoch after epoch, with resume and stats."""
from __future__ import annotations

import dataclasses
import itertools
import time
import warnings
from collections.abc import Generator, Iterator
from typing import Any, Generic, TypeVar

import numpy as np
from numpy.typing import NDArray

from ..adapters.base import Adapter
from ..adapters.box_batches import as_numpy, as_torch, box_batch
from ..adapters.caption_batches import caption_tokens
from ..augment.batch_key import BatchKey
from ..engines.base import Batch, Engine
from ..errors import LoaderStateError
from ..options.loader_options import LoaderOptions
from ..options.rank_world import torch_group_started
from ..sources.box_targets import BoxTable
from ..sources.captions import CaptionTable
from ..sources.order import OrderSpec, valid_rows
from ..sources.remote.prefetch import NoPrefetch, Prefetcher, prefetcher_for
from ..sources.sample_targets import SampleTargets
from ..sources.samples import SampleSource
from .batch_accounting import BatchAccounting
from .dataloader_compat import DataLoaderAttributes
from .epoch_position import EpochPosition
from .mix_source import Mixture, check_state
from .resume import fingerprint, parse
from .resume import state as resume_state
from .stats import LoaderStats

BatchT = TypeVar("BatchT")  # what one iteration step yields: (images, labels[, extras]) of the framework


class Loader(DataLoaderAttributes, Generic[BatchT]):
    """Batches of one split for one rank. Iterate it once per epoch; `set_epoch` for DDP-style
    control (otherwise each full pass advances the epoch by itself). `len()` is the number of
    batches an epoch holds: skipped samples' places go to spare samples (`stats.refilled`)."""

    def __init__(self, source: SampleSource, order: OrderSpec, engine: Engine, adapter: Adapter,
                 options: LoaderOptions, targets: SampleTargets | None = None, mixture: Mixture | None = None,
                 boxes: BoxTable | None = None, captions: CaptionTable | None = None) -> None:
        self.source, self.order, self.engine, self._adapter = source, order, engine, adapter
        self._captions = captions  # target="text": the split's captions by sample index
        self._boxes = boxes  # target="boxes"/"masks": the split's stored boxes by sample index
        self._targets = targets  # multi-hot labels and extras by sample index (None: class indices only)
        self.mixture = mixture  # an iofeed.Mix opened: its sources, per-source stats and skip bounds
        self.options = options
        self.image_size = options.resolved_image_size
        self._iteration: object | None = None  # token of the live iteration
        self._fetching: Prefetcher | NoPrefetch = NoPrefetch()  # the live iteration's downloads and pins
        self._closed = False
        self._follow_group = options.follows_group  # rank and world_size from a process group started later
        self._position = EpochPosition()  # epoch, batches delivered, a resume's offsets, where a pass began
        self._identity = ""  # the source's fingerprint, made when a state first needs it
        self._accounting = BatchAccounting(source, engine.describe, options.skips.max_skipped, mixture)
        self._last_valid: NDArray[np.bool_] = np.empty(0, bool)  # per row of the latest batch (see last_valid)
        self._said_uneven = False  # the warning that this rank ran out before its peers, once
        self.stats.fixed = {"samples": len(source), "rank": order.rank, "world_size": order.world_size,
                            "batch_size": order.batch_size, "image_size": options.image_size,
                            "shuffle": order.shuffle, "drop_last": order.drop_last,
                            "pad": order.pad}  # resolved; "options": asked

    @property
    def epoch(self) -> int:
        """The epoch the next batch belongs to."""
        return self._position.epoch

    @epoch.setter
    def epoch(self, epoch: int) -> None:
        self._position.epoch = epoch

    @property
    def stats(self) -> LoaderStats:
        """What the loader delivered and skipped, how long the consumer waited, its settings."""
        return self._accounting.stats

    @property
    def last_indices(self) -> NDArray[np.int64]:
        """Sample indices of the latest batch, for auditing."""
        return self._accounting.last_indices

    @property
    def last_valid(self) -> NDArray[np.bool_]:
        """Per row of the latest batch, whether it scores its sample for the first time: False for a
        padding repeat (the last round of an epoch over several ranks, or with `Order(pad="batches")`)
        or a spare in a skipped sample's place. All True when nothing was padded or refilled
        (`Order(pad="none")` pads nothing and takes no spares). It is of the latest batch the Loader
        delivered: a tf/Keras dataset prefetches ahead of the batch in hand, so there it is not that
        batch's (Lightning asks for a batch when it runs its step: there it is)."""
        return self._last_valid

    def __len__(self) -> int:
        """Batches an epoch holds at most: a resumed epoch may hold more (those counted before the
        resume, and the rest cut to this loader's world and batch size), so that a consumer that
        takes `len()` once (Lightning) misses none of its batches."""
        self._join_group()
        return self._position.length(self.order)

    @property
    def spilling(self) -> bool:
        """Whether a resumed epoch holding more than a whole epoch's batches (a larger global batch
        after the resume) was left where a consumer that took `len()` before `load_state_dict`
        stops (Lightning): its rest comes at the next pass, and epoch hooks wait for it."""
        return self._position.spilling(self._counted_order())

    def _counted_order(self) -> OrderSpec:
        """The order a resumed pass is counted in: the group's, joined first as `len()` does."""
        if self._position.in_resumed_pass:
            self._join_group()
        return self.order

    def _join_group(self) -> None:
        """Take rank and world_size from torch.distributed once it is initialised, when they were
        not given: Lightning and other trainers start the process group after the loader is made."""
        if not self._follow_group or self._position.under_way:
            return
        rank, world_size = self.options.rank_and_world_size()
        if (rank, world_size) != (self.order.rank, self.order.world_size):
            self.order = dataclasses.replace(self.order, rank=rank, world_size=world_size)
            self.stats.fixed.update(rank=rank, world_size=world_size)

    def set_epoch(self, epoch: int) -> None:
        """Start `epoch` (from its beginning) at the next iteration."""
        self._position.set_epoch(epoch)

    def __iter__(self) -> Generator[BatchT, None, None]:
        """One pass: after a whole pass, the next epoch; after `set_epoch` or `load_state_dict`,
        where they put it; after a pass left before its end (`break`, Lightning's sanity check,
        Keras peeking at a batch), that pass again from where it began, as torch's DataLoader
        starts a new pass at each `iter()`: an evaluation pass always covers its whole split."""
        self._check_open()
        if self._position.rewind(self._counted_order()):
            self._accounting.restore_skips()  # the pass left early is read again: its skips must not count twice
        self._join_group()
        run = self._position.begin(self.order)
        owned = self.order.own_samples(run.batches, self._position.done)  # each batch's samples less the padding
        token = self._iteration = object()
        self._fetching.close()  # an older iteration left suspended (tf, Lightning) holds no pins from now on
        fetching = self._fetching = prefetcher_for(self.source, run.batches, run.start,
                                                   lambda: run.following[:self.engine.starts_ahead])
        self._accounting.begin_pass(run)
        try:
            stream = self.engine.run(run.epoch, run.batches, run.start, self.order.rank, run.following)
            while True:
                self._check_open()
                if self._iteration is not token:
                    raise LoaderStateError("this loader was iterated again before this pass ended, and the newer "
                                           "iteration took over: use one iteration at a time")
                fetching.advance(run.position)
                asked = time.perf_counter()
                try:
                    batch = next(stream)
                except StopIteration:
                    break
                self._accounting.record(batch, time.perf_counter() - asked)
                batch.key = BatchKey(self.order.seed, run.epoch, self.order.rank, run.position)
                if self._position.advance(run):  # complete once its last batch is out: a consumer that
                    self._warn_if_first_out()
                    self._accounting.finish_epoch()
                    self._position.complete(run)  # stops after len() batches (Lightning) moves on
                    self._accounting.count_fetched()
                if len(batch.indices):  # an empty batch (all skipped) would be a NaN loss: only counted
                    self._last_valid = valid_rows(batch.indices, owned[run.position - 1])
                    held, batch = [batch], None
                    # no local keeps the delivered batch while this pass is suspended: its lease goes with
                    # the caller's last reference, also when a trainer keeps the iterator of a pass it left
                    yield self._deliver(held.pop())
                batch = None
            self._position.end(run)  # a pass that found its epoch delivered moves on
        finally:
            fetching.close()

    def repeat(self, epochs: int | None = None) -> Iterator[BatchT]:
        """Passes back to back, each the next epoch: endless (None), or `epochs` of them. For loops
        that count steps rather than epochs (jit-style JAX, tf.data's `repeat()`): `zip(range(steps),
        loader.repeat())` takes exactly `steps` batches, and `state_dict()` after any of them
        resumes exactly (`load_state_dict`, then `repeat()` again). A stream, not a pass: it
        continues from where the loader stands, also mid-epoch after an earlier `repeat()`."""
        self._position.continue_next()  # continue a pass left early, rather than begin it again as iter() does
        passes = itertools.count() if epochs is None else range(epochs)
        for _ in passes:
            yield from self

    def _deliver(self, batch: Batch) -> Any:
        """The adapter's form of `batch`: multi-hot labels for `Output(target="multi_hot")`, and with
        `Output(extras=True)` a third item, the list of the samples' extras."""
        if self._boxes is not None:
            return self._with_boxes(batch)
        if self._captions is not None:
            return self._with_captions(batch)
        if self._targets is None:
            return self._adapter(batch)
        if self.options.output.target == "multi_hot":
            batch = dataclasses.replace(batch, labels=self._targets.multi_hot(batch.indices))
        out = self._adapter(batch)
        return (*out, self._targets.extras_of(batch.indices)) if self.options.output.extras else out

    def _with_captions(self, batch: Batch) -> Any:
        """(images, captions) in sample order, or with a tokenizer (images, ids, lengths) from the
        workers' token rows; with `Output(extras=True)` the extras last."""
        assert self._captions is not None, "set with target='text'"
        images = self._adapter(batch)[0]
        if self.options.output.tokenizer is None:
            out: tuple[Any, ...] = (images, self._captions.texts(batch.indices))
        else:
            out = (images, *caption_tokens(batch.tokens, self.options.framework, self.options.device))
        return (*out, self._targets.extras_of(batch.indices)) if self._targets is not None else out

    def _with_boxes(self, batch: Batch) -> Any:
        """(images, targets): the boxes moved with the batch's recorded crops and flips, counted."""
        assert self._boxes is not None and self.image_size is not None, "resolved when the loader was made"
        augmentation = self.options.augmentation
        moved = box_batch(self._boxes, batch, self.image_size, augmentation.letterbox, self.options.recipe.min_visible,
                          augmentation.fitted)
        self.stats.boxes["delivered"] += len(moved.labels)
        self.stats.boxes["dropped_not_visible"] += moved.moved.dropped
        if self.options.transform is not None:
            self.stats.boxes["dropped_by_transform"] += moved.dropped_by_transform
        images = self._adapter(batch)[0]
        if self.options.framework == "torch":
            return images, as_torch(moved, self.options.device)
        if self.options.framework == "tf" or getattr(self._adapter, "keras_backend", None) == "tensorflow":
            from ..adapters.tf_boxes import as_tf  # imports TensorFlow: only here

            return images, as_tf(moved)
        return images, as_numpy(moved)

    def state_dict(self) -> dict[str, Any]:
        """Where the run is, as a small plain dict (ints and strings): the dataset's identity, the
        order's settings, the epoch and how many samples of its global order are done. It is the
        same on every rank (all ranks deliver batches in step), and `load_state_dict` continues
        from it on any world size, batch size, worker count or engine."""
        progress = self._position.progress(self.order)
        out = resume_state(self._fingerprint(), self.order, progress)
        if self.mixture is None:
            return out
        return {**out, "mixture": self.mixture.state(self.order, progress.epoch, progress.samples_done)}

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
        self._position.resume(progress)  # the next pass resumes from here
        self._join_group()
        if len(self) > len(self.order):
            warnings.warn(f"the resumed epoch holds {len(self)} batches (counting {self._position.first} done before "
                          f"the resume), more than a whole epoch's {len(self.order)}: a trainer that takes len() once "
                          "(Lightning) stops it early, and the next pass continues it", UserWarning, stacklevel=2)

    def _warn_if_first_out(self) -> None:
        """Warn once when this rank's pass ends with fewer batches than rank 0's (`pad="none"`) in a
        torch.distributed group: a per-batch collective on the other ranks would wait for ever."""
        order = self.order
        most = len(dataclasses.replace(order, rank=0))
        if self._said_uneven or order.pad != "none" or len(order) >= most or not torch_group_started():
            return
        self._said_uneven = True
        shares = " + ".join(str(dataclasses.replace(order, rank=r).per_rank) for r in range(order.world_size))
        warnings.warn(f"rank {order.rank} has delivered its last batch of split {self.options.split!r} ({len(order)}) "
                      f"while rank 0 has {most}: Order(pad='none') deals the {order.samples} samples once over "
                      f"{order.world_size} ranks ({shares}), so a collective per batch on the others (all_reduce, "
                      "all_gather) now waits for this rank for ever. Reduce metrics once after the pass, or keep the "
                      "default pad='ranks' (equal batches; loader.last_valid marks the repeats)",
                      RuntimeWarning, stacklevel=3)

    def _fingerprint(self) -> str:
        if not self._identity:
            self._identity = fingerprint(self.source) if self.mixture is None else self.mixture.identity()
        return self._identity

    def _check_open(self) -> None:
        if self._closed:
            raise LoaderStateError.closed()

    def close(self) -> None:
        """Stop workers and free shared memory (idempotent); batches already taken stay valid."""
        if not self._closed:
            self._accounting.close()
        self._closed = True
        self._fetching.close()
        getattr(self._adapter, "close", lambda: None)()  # an adapter holding engine memory (CUDA pinning) first
        self.engine.close()

    def __enter__(self) -> Loader[BatchT]:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
