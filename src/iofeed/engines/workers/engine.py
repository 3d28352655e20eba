"""The `workers` engine: processes (forkserver/spawn) decode whole batches into shared memory."""
from __future__ import annotations

import math
import time
import weakref
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np

from ... import errors
from ...augment.batch_key import BatchKey
from ...augment.target_transforms import TargetTransform, probe_target_output
from ...augment.tokenizer import SampleTokenizer
from ...augment.transform_checks import TransformedImage
from ...augment.transforms import SampleTransform, probe_output
from ...errors import LoaderStateError, SampleError, WorkerError
from ...options.loader_options import LoaderOptions
from ...runtime.processes import resolve_workers
from ...sources.samples import SampleSource
from ..base import Batch
from ..refill import spares_of
from .autotune import WindowMeter, decide
from .decode import decode_note
from .group import WorkerGroup
from .memory import SharedBlock
from .next_epoch import NextEpochStart
from .pool import SlotPool
from .process import shutdown
from .sizing import engine_layout
from .slots import Layout, default_prefetch
from .target_slots import TargetLayout
from .task import Done, Task
from .transformed_targets import TransformedTargetLayout
from .watchdog import stall_bounds

TUNE_SECONDS = 1.0


class WorkerEngine:
    """Worker processes (a `WorkerGroup`) decoding whole batches into a bounded ring of shared-memory
    slots, sent in the order of each pass.

    With `autotune`, it starts with one worker and, once per `TUNE_SECONDS`, settles the
    count that keeps the consumer from waiting (see `autotune.decide`), up to `max_workers`.
    """

    name = "workers"

    def __init__(self, source: SampleSource, options: LoaderOptions, layout: Layout,
                 found: dict[str, Any] | None = None, output: TransformedImage | None = None) -> None:
        self._source, self._augment, self._seed = source, options.augmentation, options.seed
        self.sample_output = output  # what the sample transform returns per image (probed), None without one
        self._transform = (None if output is None else TargetTransform(options.transform, output)
                           if options.moves_targets else SampleTransform(options.transform, output))
        self._spares = spares_of(options.deals_once)
        self.max_workers, self.autotune = resolve_workers(options.workers), options.workers is None
        self._initial = 1 if self.autotune else self.max_workers
        self.layout = layout
        self._generation = 0
        self._next_epoch: NextEpochStart | None = None  # the next epoch's batches under way
        self.started_ahead = 0  # batches begun during the pass before theirs, and used
        self.stopped_early = 0  # tasks of abandoned passes that workers left undone
        self._block: SharedBlock | None = None
        self._stale: SharedBlock | None = None  # one int64: tasks of generations below it stop early
        self._finalizer: weakref.finalize[Any, Any] | None = None
        self._payload: Any = None  # the slots' images and labels, viewed in the block (see `_start`)
        self._labels: Any = None
        self._stale_below: Any = None
        # the autotuner's clock: the consumer's waits and its windows (a test gives it virtual time)
        self.clock: Callable[[], float] = time.perf_counter
        self._window = WindowMeter(lambda: self.clock())
        self.decisions: list[dict[str, Any]] = []  # the autotuner's: after_seconds, workers, reason
        self._began = self.clock()  # when the workers started (decision times count from it)
        self._found = dict(found or {})  # the usable cores and memory budget, and why
        self._stall = stall_bounds()  # checked now, before any work: warn and raise after (watchdog)
        tokenizer = None if options.output.tokenizer is None else SampleTokenizer(options.output.tokenizer)
        self._group = WorkerGroup(source, layout, self._augment, options.skips.on_error, self._transform,
                                  self._stall, self.close, tokenizer)

    @property
    def workers(self) -> int:
        """Workers taking new tasks now."""
        return self._group.active if self._group.members else self._initial

    @property
    def starts_ahead(self) -> int:
        """Batches of the next epoch a pass would start now: the depth less this pass's last batch."""
        return self._depth() - 1

    def processes(self) -> list[Any]:
        """The live worker processes."""
        return self._group.processes()

    def describe(self) -> dict[str, Any]:
        """Worker count, prefetch depth and shared memory, for `loader.stats`."""
        return {
            "engine": self.name,
            "workers": self.workers,
            "autotune": self.autotune,
            "max_workers": self.max_workers,
            "prefetch_batches": self._depth(),
            "shared_memory_bytes": self.layout.total_bytes,
            "decisions": list(self.decisions[-10:]),
            "transform": None if self._transform is None else self._transform.name,
            **{key: None if math.isinf(value) else value  # None: never (the watchdog)
               for key, value in zip(("stall_warn_seconds", "stall_seconds"), self._stall)},
            **self._found,
        }

    @property
    def notes(self) -> list[str]:
        """What the engine chose once, and why, for `stats.settings["decisions"]`: the JPEG decode."""
        return decode_note(self._source, self._augment)

    def _depth(self) -> int:
        """Batches in flight or ready at most: `default_prefetch` of the workers now, within the slots
        less one (the consumer's batch it is still bound to while it asks for the next)."""
        return min(self.layout.slots - 1, default_prefetch(self.workers)) if self.autotune else self.layout.slots - 1

    def _start(self) -> None:
        self._block, self._stale = SharedBlock(self.layout.total_bytes), SharedBlock(8)
        self._payload, self._labels = self.layout.views(self._block.mapped())
        self._pool = SlotPool(self.layout.slots)
        self._region = (np.frombuffer(self._block.mapped(), np.uint8).ctypes.data, self.layout.total_bytes)
        self._stale_below = np.frombuffer(self._stale.mapped(), np.int64, 1)
        self._finalizer = weakref.finalize(self, shutdown, self._group.members, (self._block, self._stale))
        self._group.start(self._block, self._stale, self._initial)

    def run(self, epoch: int, batches: list[np.ndarray], start: int, rank: int,
            following: list[np.ndarray] | None = None) -> Iterator[Batch]:
        """Yield `batches[start:]` in order, each lent with its slot (see `SlotPool`). Once all of
        them are under way, free slots start on `following` (epoch + 1's batches)."""
        if self._block is None:
            self._start()
            self._began = self.clock()
            self._window.reset()  # starting the workers is not the consumer's time
        pool = self._pool
        begun, self._next_epoch = self._next_epoch, None
        if begun is not None and begun.matches(epoch, batches, start, rank):
            generation, ready, submitted = begun.generation, begun.ready, len(begun.sent)
            pool.start_pass(in_flight=begun.slots)
            self.started_ahead += len(begun.sent)
        else:
            self._generation += 1
            self._stale_below[0] = self._generation  # what earlier passes left queued stops at once
            self.stopped_early += self._group.drain()
            generation, ready, submitted = self._generation, {}, start
            pool.start_pass()
        needed = start
        coming = None if following is None else self._begin_next_epoch(epoch + 1, rank)
        if needed >= len(batches):
            self._next_epoch = coming
        while needed < len(batches):
            while submitted < len(batches) and submitted - needed < self._depth() and (slot := pool.take()) is not None:
                key = BatchKey(self._seed, epoch, rank, submitted)
                self._group.send(Task(generation, submitted, slot, batches[submitted], key,
                                self._spares(batches, submitted, following)))
                submitted += 1
            if coming is not None and following is not None and submitted == len(batches):  # (both or neither)
                self._send_next_epoch(coming, following, submitted - needed)
            asked = self.clock()
            while needed not in ready:
                done = self._group.receive()
                if done.generation == generation:
                    ready[done.batch_no] = done
                elif coming is not None and done.generation == coming.generation:
                    coming.ready[done.batch_no] = done
            done = ready.pop(needed)
            if self._group.closed:  # by another thread (a tf.data prefetch thread runs this generator)
                raise LoaderStateError.closed()
            if done.error is not None:
                raise (SampleError if done.sample_error else getattr(errors, done.kind, WorkerError))(done.error)
            if done.exhausted and len(spare := self._spares(batches, needed, following)) > done.spares:
                # started early, it ran out of the spares its own epoch holds: again, with the next epoch's
                key = BatchKey(self._seed, epoch, rank, needed)
                self._group.send(Task(generation, needed, done.slot, batches[needed], key, spare))
                continue
            self._window.add(len(done.delivered), self.clock() - asked, done.busy_seconds)
            if needed == len(batches) - 1:  # before the last yield: a consumer that stops after
                self._next_epoch = coming  # len() batches (Lightning) never resumes this generator
            yield self._batch(done)
            needed += 1
            if self.autotune and self._window.elapsed() >= TUNE_SECONDS:
                self._tune()

    def _batch(self, done: Done) -> Batch:
        """The consumer's batch of a finished task: its images lent with the slot (or copied),
        labels copied (they are small). Nothing here keeps a reference to the images."""
        n = len(done.delivered)
        slot_payload = self.layout.slot(self._payload, done.slot)
        images, lease = self._pool.hand_out(done.slot, lambda wrap: self.layout.images(slot_payload, n, wrap))
        geometry = self.layout.geometry(slot_payload, n) if isinstance(self.layout, TargetLayout) else None
        targets = (self.layout.packed(slot_payload, n) if isinstance(self.layout, TransformedTargetLayout)
                   else None)
        return Batch(images, self._labels[done.slot, :n].copy(), done.delivered, done.skipped,
                     done.transform_seconds, done.cpu_seconds, transform_wall_seconds=done.transform_wall_seconds,
                     lease=lease, copied=lease is None,
                     refilled=done.refilled, region=self._region if lease is not None else None, geometry=geometry,
                     targets=targets, tokens=done.tokens)

    def _begin_next_epoch(self, epoch: int, rank: int) -> NextEpochStart:
        self._generation += 1
        return NextEpochStart(self._generation, epoch, rank)

    def _send_next_epoch(self, begun: NextEpochStart, following: list[np.ndarray], in_flight: int) -> None:
        """Send `following`'s next batches to free slots, within the prefetch depth."""
        while len(begun.sent) < len(following) and in_flight + len(begun.sent) < self._depth():
            batch_no, slot = len(begun.sent), self._pool.take()
            if slot is None:
                return
            key = BatchKey(self._seed, begun.epoch, begun.rank, batch_no)
            spare = self._spares(following, batch_no, None)  # of its own epoch only: the one after is not known yet
            self._group.send(Task(begun.generation, batch_no, slot, following[batch_no], key, spare))
            begun.sent.append(following[batch_no])
            begun.slots.add(slot)

    def _tune(self) -> None:
        decision = decide(self._window.close(self.workers), self.max_workers)
        if decision.workers != self.workers or not self.decisions:
            self.decisions.append({"after_seconds": round(self.clock() - self._began, 1),
                                   "workers": decision.workers, "reason": decision.reason})
        self._group.resize(decision.workers)

    def close(self) -> None:
        """Stop the workers and free the shared memory (also on garbage collection and exit)."""
        self._group.closed = True
        if self._finalizer is not None:
            self._payload = self._labels = self._stale_below = None
            self._finalizer()
            self._finalizer = None


def make_worker_engine(source: SampleSource, options: LoaderOptions) -> WorkerEngine:
    """A workers engine: `workers=None` autotunes up to this rank's usable cores; slots fit
    `memory_budget` (default: a quarter of this rank's usable memory).

    With `gpu_augment`, packed slots carry stored pixels and crop boxes for augmenting on the
    device instead of augmented images. A sample transform is probed here, on one image, before
    any slot is made: the slots hold what it returns (OptionError naming it when that is wrong)."""
    output = (None if options.transform is None
              else probe_target_output(options.transform, options.resolved_image_size,
                                       options.output.target == "masks")
              if options.moves_targets else probe_output(options.transform, options.resolved_image_size))
    layout, found = engine_layout(source, options, output)
    return WorkerEngine(source, options, layout, found, output)
