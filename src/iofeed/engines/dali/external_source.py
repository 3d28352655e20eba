"""The `dali` engine's `fn.external_source` callback: each batch of iofeed's order read, sized
and placed (crop box, flip) with the workers engine's RNG key, handed to DALI in order."""
from __future__ import annotations

import math
import traceback
from collections import deque
from dataclasses import dataclass, field

import numpy as np

from ...augment.batch_key import BatchKey
from ...errors import SampleError, WorkerError
from ...image.boxes import Augment
from ...sources.sample_reader import SampleReader
from ...sources.samples import SampleSource
from ..base import sample_failure
from ..refill import fill, spares_of
from .inputs import encoded_for_dali


@dataclass
class PreparedBatch:
    """One batch as the callback prepared it; those `sent_to_dali` have a DALI output waiting."""

    batch_no: int
    indices: np.ndarray
    labels: np.ndarray
    skipped: list[tuple[int, str]] = field(default_factory=list)
    sent_to_dali: bool = False
    error: Exception | None = None
    refilled: int = 0


class ExternalSource:
    """The external_source callback: the next batch of the order as DALI inputs, in order.

    DALI calls it (prefetching up to the queue depth) from the thread that calls `run()`.
    Each call also appends a `PreparedBatch` to `pending`; batches with nothing to decode (all
    samples skipped) are prepared but not sent to DALI, and an error ends the epoch's inputs.
    """

    def __init__(self, source: SampleSource, augment: Augment, seed: int, on_error: str, bad: dict[int, str],
                 deals_once: bool = False) -> None:
        self._source, self._augment, self._seed, self._on_error, self._bad = source, augment, seed, on_error, bad
        self._spares = spares_of(deals_once)  # pad="none": no spares (each sample scored once)
        self._reader = SampleReader(source)
        self.pending: deque[PreparedBatch] = deque()
        self._batches: list[np.ndarray] = []
        self._following: list[np.ndarray] | None = None
        self._epoch = self._rank = self._next = 0

    def start(self, epoch: int, batches: list[np.ndarray], start: int, rank: int,
              following: list[np.ndarray] | None = None) -> None:
        """Hand DALI `batches[start:]` of `epoch` from the next call on (`following`: the next epoch's
        batches, spares for the last ones)."""
        self._epoch, self._batches, self._next, self._rank = epoch, batches, start, rank
        self._following = following
        self.pending.clear()

    def stop(self) -> None:
        """End the epoch at the next call."""
        self._next = len(self._batches)

    def __call__(self) -> tuple[list[np.ndarray], ...]:
        while self._next < len(self._batches):
            batch_no = self._next
            self._next += 1
            self._reader.begin_batch(self._epoch)
            try:
                planned, inputs = self._prepare(batch_no)
            except Exception:  # noqa: BLE001 - surfaced in the consumer, where the batch is due
                planned, inputs = self._failed(batch_no, WorkerError(traceback.format_exc(limit=-3))), None
            self._reader.end_batch()
            self.pending.append(planned)
            if planned.error is not None:
                self.stop()
            elif inputs is not None:
                planned.sent_to_dali = True
                return inputs
        raise StopIteration

    def _failed(self, batch_no: int, error: Exception) -> PreparedBatch:
        return PreparedBatch(batch_no, np.empty(0, np.int64), np.empty(0, np.int64), error=error)

    def _prepare(self, batch_no: int) -> tuple[PreparedBatch, tuple[list[np.ndarray], ...] | None]:
        """Read, size and place every sample of batch `batch_no`, spares in skipped ones' places
        (`refill.fill`); same RNG key as the workers engine."""
        rng = BatchKey(self._seed, self._epoch, self._rank, batch_no).rng()
        encoded, anchors, shapes, starts, ends = [], [], [], [], []

        def load(k: int, position: int, index: int, spare: bool) -> str | None:
            reason = self._bad.get(index)
            if reason is None:
                try:
                    data, (width, height) = encoded_for_dali(self._reader.read(index))
                except SampleError as exc:
                    reason = str(exc)
            if reason is not None:
                failure = None if spare else sample_failure(self._on_error, self._source.path_of(index), reason)
                if failure is not None:
                    raise failure
                return reason
            (left, top, right, bottom), flip = self._augment.box(width, height, rng)
            x0, y0 = max(0, math.floor(left)), max(0, math.floor(top))
            x1, y1 = min(width, math.ceil(right)), min(height, math.ceil(bottom))
            encoded.append(np.frombuffer(data, np.uint8))
            anchors.append(np.array([x0, y0], np.int32))
            shapes.append(np.array([max(1, x1 - x0), max(1, y1 - y0)], np.int32))
            # resize ROI inside the decoded slice, (y, x) order; x ends swapped to mirror
            x_from, x_to = (right - x0, left - x0) if flip else (left - x0, right - x0)
            starts.append(np.array([top - y0, x_from], np.float32))
            ends.append(np.array([bottom - y0, x_to], np.float32))
            return None

        try:
            filled = fill(self._batches[batch_no], self._spares(self._batches, batch_no, self._following), load,
                          self._source.part_of)
        except SampleError as failure:
            return self._failed(batch_no, failure), None
        indices = np.asarray(filled.delivered, np.int64)
        planned = PreparedBatch(batch_no, indices, self._source.label[indices], filled.skipped,
                                refilled=filled.refilled)
        return planned, ((encoded, anchors, shapes, starts, ends) if filled.delivered else None)

    def close(self) -> None:
        self._reader.close()
