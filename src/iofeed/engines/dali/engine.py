"""The `dali` engine: NVIDIA DALI decodes batches whose order, crop boxes and flips iofeed decides.

DALI reads nothing by itself here. A batch-mode `fn.external_source` callback, run by DALI in
the consumer's thread while its own threads decode earlier batches, reads the encoded bytes of
each batch of `OrderSpec.batches(epoch)` with `SampleReader`, parses their headers and draws
the crop boxes with the same `Augment.box` and the same per-batch RNG key (`BatchKey`) as the
workers engine.
DALI decodes only the box's pixel region (`fn.decoders.image_slice`, ROI decoding; on the GPU
with `device="mixed"`, hardware JPEG decoder included) and `fn.resize` maps the exact
(sub-pixel) box to `size` x `size`, mirrored by swapping the box's x ends. So order, sharding,
resume and crop geometry are the workers engine's, whatever the thread count.

`fn.readers.webdataset` / `fn.readers.file` are not used: they shuffle by themselves (a
buffer shuffle seeded per pipeline) and cannot follow an order given from outside.
"""
from __future__ import annotations

import re
from collections import deque
from collections.abc import Iterator
from typing import Any

import numpy as np

from ...errors import OptionError, WorkerError
from ...options.loader_options import LoaderOptions
from ...runtime.gpu.dali import require_dali
from ...runtime.gpu.streams import consumer_stream, cuda_device_id
from ...runtime.processes import resolve_workers
from ...sources.samples import SampleSource
from ..base import Batch, sample_failure
from .external_source import ExternalSource, PreparedBatch
from .validate import validate_folder

DEFAULT_HW_DECODER_LOAD = 0.65  # DALI's own default: share of JPEGs for the hardware decoder
DEFAULT_PREFETCH = 2  # DALI's own default queue depth
_FAILED_SAMPLE = re.compile(r"[Ff]ailed to decode sample #(\d+)")


class DaliEngine:
    """A DALI pipeline decoding in iofeed's order: uint8 NHWC batches on the CPU or on a GPU.

    `options.workers` is DALI's thread count (all cores by default),
    `options.resources.prefetch` its queue depth (DALI's default of 2). On a GPU, batches stay
    there unless the adapter wants host arrays (`options.host`): then the engine copies them to
    the host itself."""

    name = "dali"
    starts_ahead = 0  # the pipeline is reset between epochs
    sample_output = None  # DALI runs no sample transform

    def __init__(
        self, source: SampleSource, options: LoaderOptions, hw_decoder_load: float = DEFAULT_HW_DECODER_LOAD,
    ) -> None:
        require_dali()
        if not 0.0 <= hw_decoder_load <= 1.0:
            raise OptionError(f"hw_decoder_load must be in [0, 1], got {hw_decoder_load}")
        self._source, self._augment, self._seed = source, options.augmentation, options.seed
        self.batch_size, self.threads = options.batch_size, resolve_workers(options.workers)
        self.prefetch = DEFAULT_PREFETCH if options.resources.prefetch is None else options.resources.prefetch
        self.device_id = cuda_device_id(options.device)
        self.host = options.host
        self.hw_decoder_load = hw_decoder_load
        self._bad = validate_folder(source, self.threads)  # index -> reason; DALI failures are added
        self._checked = len(source) if source.kind == "folder" or not source.validated else 0
        self._inputs = ExternalSource(source, self._augment, self._seed, options.skips.on_error, self._bad,
                                      options.deals_once)
        self._on_error = options.skips.on_error
        self._pipe: Any = None
        self.restarts = 0  # pipeline resets after a sample DALI could not decode (never a rebuild)
        self._state = "idle"  # "running": an epoch may have outputs queued; "ended": needs reset()

    @property
    def device(self) -> str:
        return "cpu" if self.device_id is None else f"cuda:{self.device_id}"

    def describe(self) -> dict[str, Any]:
        """Device, threads, prefetch depth and the index-time validation, for `loader.stats`."""
        return {
            "engine": self.name,
            "device": self.device,
            "decoder": "cpu" if self.device_id is None else "mixed",
            "num_threads": self.threads,
            "prefetch_batches": self.prefetch,
            "hw_decoder_load": None if self.device_id is None else self.hw_decoder_load,
            "validated_files": self._checked,
            "invalid_files": len(self._bad),
        }

    def _build(self) -> None:
        dali = require_dali()
        fn, types = dali.fn, dali.types
        # the dynamic executor: the only one that binds run()'s outputs to the consumer's stream
        pipe = dali.Pipeline(batch_size=self.batch_size, num_threads=self.threads, device_id=self.device_id,
                             prefetch_queue_depth=self.prefetch, exec_dynamic=True)
        with pipe:
            encoded, anchor, shape, roi_start, roi_end = fn.external_source(
                source=self._inputs, num_outputs=5, batch=True, parallel=False,
                dtype=[types.UINT8, types.INT32, types.INT32, types.FLOAT, types.FLOAT], ndim=[1, 1, 1, 1, 1],
            )
            if self.device_id is None:
                images = fn.decoders.image_slice(encoded, anchor, shape, device="cpu", output_type=types.RGB)
            else:
                images = fn.decoders.image_slice(encoded, anchor, shape, device="mixed", output_type=types.RGB,
                                                 hw_decoder_load=self.hw_decoder_load)
            side = self._augment.size
            interp = {"bilinear": types.INTERP_LINEAR, "bicubic": types.INTERP_CUBIC}[self._augment.interpolation]
            images = fn.resize(images, size=[side, side], roi_start=roi_start, roi_end=roi_end,
                               interp_type=interp, antialias=True)
            pipe.set_outputs(images)
        try:
            pipe.build()
        except RuntimeError as exc:
            raise WorkerError(f"DALI cannot build its pipeline on {self.device}: {_first_line(exc)}") from None
        self._pipe, self._state = pipe, "idle"

    def _settle(self) -> None:
        """Make the pipeline ready for a new pass: drain what an abandoned one queued, reset."""
        if self._state == "running":
            self._drain()
        if self._state != "idle":
            self._pipe.reset()
        self._state = "idle"

    def _drain(self) -> None:
        """Stop handing DALI inputs and run out the batches it already took (discarded: at most its queue
        depth). A batch that fails here fails alone: DALI's dynamic executor goes on after an
        operator error, so the pipeline needs no rebuild (measured with DALI 2.4, CPU)."""
        self._inputs.stop()
        while True:
            try:
                self._pipe.run()
            except StopIteration:
                break
            except RuntimeError:
                continue
        self._state = "ended"

    def run(self, epoch: int, batches: list[np.ndarray], start: int, rank: int,
            following: list[np.ndarray] | None = None) -> Iterator[Batch]:
        """Yield `batches[start:]` of `epoch` in order. (`following` gives the last batches their
        spares; nothing starts on it: the pipeline is reset between passes.)

        A sample DALI cannot decode fails its whole batch: the sample is named and marked bad (or
        raised), the batches DALI had taken after it are drained, the pipeline is reset and fed
        again from that batch, its place now a spare's. No rebuild: a rebuild per bad file cost
        seconds on a GPU (docs/decisions/0083-dali-resets-after-a-file-it-cannot-decode.md). The
        same batch failing more often than it has samples is an error."""
        if self._pipe is None:
            self._build()
        self._settle()
        inputs, pending = self._inputs, self._inputs.pending
        inputs.start(epoch, batches, start, rank, following)
        self._state = "running"
        restarts = 0
        while True:
            yield from self._unsent(pending)
            try:
                (images,) = self._pipe.run(consumer_stream(self.device_id))
            except StopIteration:
                self._state = "ended"
                yield from self._unsent(pending)
                return
            except RuntimeError as exc:
                yield from self._unsent(pending)
                failed = self._mark_failed(pending.popleft() if pending else None, exc)
                restarts += 1
                if restarts > len(batches[failed.batch_no]) + 1:
                    raise WorkerError(f"DALI keeps failing on batch {failed.batch_no}: {_first_line(exc)}") from None
                self._drain()
                self._pipe.reset()
                self.restarts += 1
                inputs.start(epoch, batches, failed.batch_no, rank, following)
                self._state = "running"
                continue
            yield from self._unsent(pending)
            planned = pending.popleft()
            yield Batch(self._host_or_device(images), planned.labels, planned.indices, planned.skipped,
                        refilled=planned.refilled)

    def _unsent(self, pending: deque[PreparedBatch]) -> Iterator[Batch]:
        """Batches at the head of `pending` that DALI never saw: all skipped (empty), or an error."""
        while pending and not pending[0].sent_to_dali:
            planned = pending.popleft()
            if planned.error is not None:
                raise planned.error
            yield Batch(np.empty((0, self._augment.size, self._augment.size, 3), np.uint8),
                        planned.labels, planned.indices, planned.skipped)

    def _mark_failed(self, planned: PreparedBatch | None, exc: RuntimeError) -> PreparedBatch:
        """DALI could not decode a sample of `planned` that validation let through: name it,
        remember it (and return the batch, to be sent to DALI again), or raise."""
        match = _FAILED_SAMPLE.search(str(exc))
        if planned is None or match is None or int(match[1]) >= len(planned.indices):
            where = "" if planned is None else f" in batch {planned.batch_no} (" + ", ".join(
                self._source.path_of(int(i)) for i in planned.indices[:8]) + ")"
            raise WorkerError(f"DALI failed{where}: {_first_line(exc)}") from None
        index = int(planned.indices[int(match[1])])
        reason = "corrupt or truncated image (DALI could not decode it)"
        failure = sample_failure(self._on_error, self._source.path_of(index), reason)
        if failure is not None:
            raise failure from None
        self._bad[index] = reason
        return planned

    def _host_or_device(self, images: Any) -> Any:
        """A CPU batch as a zero-copy, writable numpy array (the buffer keeps DALI's tensor alive);
        a GPU batch copied to such an array when the adapter wants host arrays, else as a
        DLPack-capable DALI tensor (`__dlpack__` syncs the consumer's stream)."""
        tensor = images.as_tensor()
        if self.device_id is None:
            # the dynamic executor's outputs are the batch's own, so a kept batch stays as it was;
            # a static executor reuses its output buffers: its batches are copied
            return np.asarray(tensor) if self._pipe.exec_dynamic else np.array(tensor)
        return np.asarray(tensor.as_cpu()) if self.host else tensor

    def close(self) -> None:
        """Stop DALI's threads and free its buffers (idempotent): the pipeline is dropped, and
        DALI's own finaliser stops it then (it holds no reference cycle: freed at once)."""
        self._pipe, self._state = None, "idle"
        self._inputs.close()


def _first_line(exc: BaseException) -> str:
    """The informative part of a DALI error: the line after "encountered:", else the first line."""
    text = str(exc)
    tail = text.split("encountered:", 1)[-1].strip()
    return (tail or text).splitlines()[0] if (tail or text) else type(exc).__name__
