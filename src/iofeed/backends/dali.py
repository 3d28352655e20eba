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

import math
import os
import re
import sys
import traceback
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..device import loader_device
from ..errors import OptionError, SampleError, WorkerError, require
from ..image.boxes import Augment
from ..image.fastjpeg import decode_problem
from ..image.pil import Opened, decode_rgb, open_image
from ..options import LoaderOptions
from ..parallel import resolve_workers, worker_pool
from ..samples import SampleReader, SampleSource
from .base import Batch, BatchKey, sample_failure
from .refill import fill, spares

DEFAULT_HW_DECODER_LOAD = 0.65  # DALI's own default: share of JPEGs for the hardware decoder
DEFAULT_PREFETCH = 2  # DALI's own default queue depth
INLINE_CHECK_FILES = 64  # folders up to this size are validated in-process (no pool start-up)
_FAILED_SAMPLE = re.compile(r"[Ff]ailed to decode sample #(\d+)")
_SOF = {0xC0, 0xC1, 0xC2}  # baseline, extended, progressive Huffman JPEG


# ---------------------------------------------------------------- device


def cuda_device_id(device: Any) -> int | None:
    """DALI's `device_id` for the loader's `device`: None for the CPU, else the CUDA ordinal."""
    resolved = loader_device(device)
    return None if resolved == "cpu" else int(resolved.split(":")[1])


def consumer_stream(device_id: int | None) -> Any:
    """PyTorch's current CUDA stream on `device_id` when DALI runs there and PyTorch has
    initialised CUDA, else None: what to pass to `pipe.run()`.

    DALI binds its outputs to this stream: the consumer's kernels wait for them without a host
    sync, and DALI frees each output in that stream's order, after the kernels queued on it have
    read it. Without a stream the outputs are host-synchronous and freed as soon as the last
    reference goes, possibly before queued kernels have read them.
    """
    torch = sys.modules.get("torch")
    if device_id is None or torch is None or not torch.cuda.is_initialized():
        return None
    return torch.cuda.current_stream(device_id)


# ---------------------------------------------------------------- index-time validation


def check_file(path: bytes, offset: int = 0, size: int = -1) -> str | None:
    """Why the image file at `path` (or its `size` bytes at `offset`) cannot be decoded, or None.
    Runs in a pool worker.

    Decodes the whole entropy-coded stream (JPEGs at 1/8 DCT scale), so truncated or corrupt
    files are found here, not by DALI mid-epoch, where they would stop the pipeline. JPEGs are
    also checked as strictly as the workers engine decodes them: DALI would decode corrupt
    data that engine refuses, and the two engines would deliver different samples.
    """
    try:
        with open(path, "rb") as f:
            data = f.read() if size < 0 else os.pread(f.fileno(), size, offset)
    except OSError as exc:
        return f"unreadable ({exc.strerror})"
    return decode_problem(data)


def validate_folder(source: SampleSource, workers: int) -> dict[int, str]:
    """{sample index: reason} for every file of a folder source, or image of a dataset whose images
    were not validated (shards indexed in place by `iofeed index`), that does not decode."""
    if (source.kind == "folder" or not source.validated) and len(source) and source.remote is None:
        items = [(source.files[f], int(o), int(n)) for f, o, n in zip(source.file_id, source.offset, source.size)]
    else:
        return {}
    if len(items) <= INLINE_CHECK_FILES or workers == 1:
        reasons = [check_file(*item) for item in items]
    else:
        with worker_pool(workers) as pool:
            reasons = pool.starmap(check_file, items, chunksize=max(1, min(256, len(items) // (8 * workers))))
    return {i: reason for i, reason in enumerate(reasons) if reason is not None}


# ---------------------------------------------------------------- reading one sample


def jpeg_header(data: bytes) -> tuple[int, int] | None:
    """(width, height) of a plain JPEG DALI decodes as Pillow does, from its markers (fast).

    None when it is not one: other formats, EXIF (orientation needs Pillow), CMYK, arithmetic
    coding, or anything unexpected.
    """
    if data[:2] != b"\xff\xd8":
        return None
    i, end = 2, len(data)
    while i + 4 <= end:
        if data[i] != 0xFF:
            return None
        marker = data[i + 1]
        if marker == 0xFF:  # fill byte
            i += 1
            continue
        length = (data[i + 2] << 8) | data[i + 3]
        if marker == 0xE1 and data[i + 4 : i + 10] == b"Exif\x00\x00":
            return None
        if marker in _SOF:
            if i + 10 > end or data[i + 9] not in (1, 3):
                return None
            height, width = (data[i + 5] << 8) | data[i + 6], (data[i + 7] << 8) | data[i + 8]
            return (width, height) if width and height else None
        if 0xC3 <= marker <= 0xCF or marker in (0xD9, 0xDA):  # other SOFs, end, scan before a frame
            return None
        i += 2 + length
    return None


def dali_native(opened: Opened) -> bool:
    """Whether DALI decodes this image exactly as iofeed's Pillow path does (RGB, no alpha)."""
    img = opened.image
    return img.format in ("JPEG", "PNG") and img.mode in ("RGB", "L") and "transparency" not in img.info


def encoded_for_dali(data: bytes) -> tuple[bytes, tuple[int, int]]:
    """(bytes DALI can decode, (width, height) after EXIF orientation). Raises SampleError.

    Plain JPEG and PNG go as they are (DALI applies EXIF orientation itself). Anything else
    (alpha composited on white, GIF, CMYK, 16-bit...) is converted by iofeed's Pillow path
    and handed over as an uncompressed PPM, so both engines see the same pixels.
    """
    size = jpeg_header(data)
    if size is not None:
        return data, size
    opened = open_image(data)
    if dali_native(opened):
        return data, opened.size
    image = decode_rgb(opened).image
    return b"P6\n%d %d\n255\n" % image.size + image.tobytes(), image.size


# ---------------------------------------------------------------- the feed


@dataclass
class _Planned:
    """One batch as the feed prepared it; `fed` ones have a DALI output waiting."""

    batch_no: int
    indices: np.ndarray
    labels: np.ndarray
    skipped: list[tuple[int, str]] = field(default_factory=list)
    fed: bool = False
    error: Exception | None = None
    refilled: int = 0


class _Feed:
    """The external_source callback: the next planned batch as DALI inputs, in order.

    DALI calls it (prefetching up to the queue depth) from the thread that calls `run()`.
    Each call also appends a `_Planned` to `pending`; batches with nothing to decode (all
    samples skipped) are planned but not fed, and an error stops the feeding.
    """

    def __init__(self, source: SampleSource, augment: Augment, seed: int, on_error: str, bad: dict[int, str]) -> None:
        self._source, self._augment, self._seed, self._on_error, self._bad = source, augment, seed, on_error, bad
        self._reader = SampleReader(source)
        self.pending: deque[_Planned] = deque()
        self._batches: list[np.ndarray] = []
        self._following: list[np.ndarray] | None = None
        self._epoch = self._rank = self._next = 0

    def start(self, epoch: int, batches: list[np.ndarray], start: int, rank: int,
              following: list[np.ndarray] | None = None) -> None:
        """Feed `batches[start:]` of `epoch` from the next call on (`following`: the next epoch's
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
                planned.fed = True
                return inputs
        raise StopIteration

    def _failed(self, batch_no: int, error: Exception) -> _Planned:
        return _Planned(batch_no, np.empty(0, np.int64), np.empty(0, np.int64), error=error)

    def _prepare(self, batch_no: int) -> tuple[_Planned, tuple[list[np.ndarray], ...] | None]:
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
            filled = fill(self._batches[batch_no], spares(self._batches, batch_no, self._following), load)
        except SampleError as failure:
            return self._failed(batch_no, failure), None
        indices = np.asarray(filled.delivered, np.int64)
        planned = _Planned(batch_no, indices, self._source.label[indices], filled.skipped, refilled=filled.refilled)
        return planned, ((encoded, anchors, shapes, starts, ends) if filled.delivered else None)

    def close(self) -> None:
        self._reader.close()


# ---------------------------------------------------------------- the engine


class DaliEngine:
    """A DALI pipeline fed in iofeed's order: uint8 NHWC batches on the CPU or on a GPU.

    `options.workers` is DALI's thread count (all cores by default), `options.prefetch` its
    queue depth (DALI's default of 2). On a GPU, batches stay there unless the adapter wants
    host arrays (`options.host`): then the engine copies them to the host itself."""

    name = "dali"
    starts_ahead = 0  # the pipeline is reset between epochs

    def __init__(
        self, source: SampleSource, options: LoaderOptions, hw_decoder_load: float = DEFAULT_HW_DECODER_LOAD,
    ) -> None:
        require("nvidia.dali", "dali")
        if not 0.0 <= hw_decoder_load <= 1.0:
            raise OptionError(f"hw_decoder_load must be in [0, 1], got {hw_decoder_load}")
        self._source, self._augment, self._seed = source, options.augmentation, options.seed
        self.batch_size, self.threads = options.batch_size, resolve_workers(options.workers)
        self.prefetch = DEFAULT_PREFETCH if options.prefetch is None else options.prefetch
        self.device_id = cuda_device_id(options.device)
        self.host = options.host
        self.hw_decoder_load = hw_decoder_load
        self._bad = validate_folder(source, self.threads)  # index -> reason; DALI failures are added
        self._checked = len(source) if source.kind == "folder" or not source.validated else 0
        self._feed = _Feed(source, self._augment, self._seed, options.on_error, self._bad)
        self._on_error = options.on_error
        self._pipe: Any = None
        self._state = "idle"  # "running": an epoch may have outputs queued; "ended": needs reset()

    @property
    def device(self) -> str:
        return "cpu" if self.device_id is None else f"cuda:{self.device_id}"

    def describe(self) -> dict[str, Any]:
        """Device, threads, prefetch depth and the index-time validation, for `loader.stats`."""
        return {
            "backend": self.name,
            "device": self.device,
            "decoder": "cpu" if self.device_id is None else "mixed",
            "num_threads": self.threads,
            "prefetch_batches": self.prefetch,
            "hw_decoder_load": None if self.device_id is None else self.hw_decoder_load,
            "validated_files": self._checked,
            "invalid_files": len(self._bad),
        }

    def _build(self) -> None:
        dali = require("nvidia.dali", "dali")
        fn, types = dali.fn, dali.types
        pipe = dali.Pipeline(batch_size=self.batch_size, num_threads=self.threads, device_id=self.device_id,
                             prefetch_queue_depth=self.prefetch)
        with pipe:
            encoded, anchor, shape, roi_start, roi_end = fn.external_source(
                source=self._feed, num_outputs=5, batch=True, parallel=False,
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
        """Make the pipeline ready for a new epoch: drain what an abandoned one queued, reset."""
        if self._state == "running":
            self._feed.stop()
            try:
                while True:
                    self._pipe.run()
            except StopIteration:
                pass
            except RuntimeError:  # a bad sample in the discarded batches: start afresh
                self._shutdown()
                self._build()
                return
        if self._state != "idle":
            self._pipe.reset()
        self._state = "idle"

    def run(self, epoch: int, batches: list[np.ndarray], start: int, rank: int,
            following: list[np.ndarray] | None = None) -> Iterator[Batch]:
        """Yield `batches[start:]` of `epoch` in order. (`following` gives the last batches their
        spares; nothing starts on it: the pipeline is reset between passes.)"""
        if self._pipe is None:
            self._build()
        self._settle()
        feed, pending = self._feed, self._feed.pending
        feed.start(epoch, batches, start, rank, following)
        self._state = "running"
        restarts = 0
        while True:
            yield from self._unfed(pending)
            try:
                (images,) = self._pipe.run(consumer_stream(self.device_id))
            except StopIteration:
                self._state = "ended"
                yield from self._unfed(pending)
                return
            except RuntimeError as exc:
                yield from self._unfed(pending)
                failed = pending.popleft() if pending else None
                self._mark_failed(failed, exc)
                restarts += 1
                if restarts > len(batches[failed.batch_no]) + 1:
                    raise WorkerError(f"DALI keeps failing on batch {failed.batch_no}: {_first_line(exc)}") from None
                self._shutdown()
                self._build()
                feed.start(epoch, batches, failed.batch_no, rank, following)
                self._state = "running"
                continue
            yield from self._unfed(pending)
            planned = pending.popleft()
            yield Batch(self._host_or_device(images), planned.labels, planned.indices, planned.skipped,
                        refilled=planned.refilled)

    def _unfed(self, pending: deque[_Planned]) -> Iterator[Batch]:
        """Batches at the head of `pending` that DALI never saw: all skipped (empty), or an error."""
        while pending and not pending[0].fed:
            planned = pending.popleft()
            if planned.error is not None:
                raise planned.error
            yield Batch(np.empty((0, self._augment.size, self._augment.size, 3), np.uint8),
                        planned.labels, planned.indices, planned.skipped)

    def _mark_failed(self, planned: _Planned | None, exc: RuntimeError) -> None:
        """DALI could not decode a sample that validation let through: name it, remember it, or raise."""
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

    def _shutdown(self) -> None:
        pipe, self._pipe, self._state = self._pipe, None, "idle"
        if pipe is not None:
            getattr(pipe, "_shutdown", lambda: None)()  # what Pipeline.__del__ does, now rather than at GC

    def close(self) -> None:
        """Stop DALI's threads and free its buffers (idempotent)."""
        self._shutdown()
        self._feed.close()


def _first_line(exc: BaseException) -> str:
    """The informative part of a DALI error: the line after "encountered:", else the first line."""
    text = str(exc)
    tail = text.split("encountered:", 1)[-1].strip()
    return (tail or text).splitlines()[0] if (tail or text) else type(exc).__name__
