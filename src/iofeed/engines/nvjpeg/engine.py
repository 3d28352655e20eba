"""The `nvjpeg` engine: worker processes read and pack each batch's JPEG bytes (no decoding); the
consumer decodes the batch in one call on its device (nvJPEG on a GPU, the same library's CPU
decode elsewhere), then crops, resizes and flips it there in batched kernels.

The workers are the `workers` engine's (order, prefetch, the next epoch begun early, refills,
watchdog, autotuning, shared-memory slots lent with leases) with `EncodedLayout` slots: crop
boxes and flips come from the same per-batch RNG key, in the same order, so the samples, their
boxes and a resume are the workers engine's. Folders and datasets indexed in place are checked
once before the first epoch, as the `dali` engine does (`validate_folder`): a file that does
not decode is skipped (and refilled) by the workers, never met by the batched decode.
"""
from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace
from typing import Any

import numpy as np
import torch

from ...options.loader_options import LoaderOptions
from ...runtime.processes import resolve_workers
from ...sources.samples import SampleSource
from ..base import Batch, sample_failure
from ..dali.validate import validate_folder
from ..workers.engine import WorkerEngine
from ..workers.sizing import engine_layout
from .crop import crop_resize_flip
from .decoders import batch_decoder, decode_batch
from .packing import JPEG, EncodedImages, EncodedLayout


class NvjpegEngine:
    """Batches decoded by one batched JPEG call on `options.device`: uint8 NHWC, a device tensor
    for the torch adapter on a GPU, else a numpy array (`options.host`, or the CPU)."""

    name = "nvjpeg"
    sample_output = None  # the workers pack bytes: no sample transform can run on them

    def __init__(self, source: SampleSource, options: LoaderOptions) -> None:
        self._source, self._on_error = source, options.skips.on_error
        self.device = torch.device(options.device)
        self.host = options.host or self.device.type == "cpu"
        self.side = options.resolved_image_size
        self.decoder, self._decode = batch_decoder()
        bad = validate_folder(source, resolve_workers(options.workers))
        layout, found = engine_layout(source, options, layout_of=lambda slots: EncodedLayout.for_source(
            source, slots, options.batch_size, options.resolved_image_size, bad))
        self._workers = WorkerEngine(source, options, layout, found)
        self.invalid_files = len(bad)
        self.decoded_on_cpu = 0  # JPEGs the batched decoder refused, decoded by the CPU path
        self.finished_by_workers = 0  # images the workers decoded (not sequential JPEGs)
        self.failed = 0  # JPEGs no decoder could read at batch time

    @property
    def starts_ahead(self) -> int:
        return self._workers.starts_ahead

    def processes(self) -> list[Any]:
        """The live worker processes."""
        return self._workers.processes()

    def describe(self) -> dict[str, Any]:
        """The workers' settings and memory, the decoder and device, what took another path."""
        return {**self._workers.describe(), "engine": self.name, "decoder": self.decoder,
                "device": str(self.device), "invalid_files": self.invalid_files,
                "decoded_on_cpu": self.decoded_on_cpu, "finished_by_workers": self.finished_by_workers,
                "failed_at_decode": self.failed}

    def run(self, epoch: int, batches: list[np.ndarray], start: int, rank: int,
            following: list[np.ndarray] | None = None) -> Iterator[Batch]:
        """Yield `batches[start:]` of `epoch` in order, each decoded as it comes from the workers."""
        for packed in self._workers.run(epoch, batches, start, rank, following):
            yield self._decoded(packed)

    def _decoded(self, packed: Batch) -> Batch:
        """One packed batch decoded, cropped, resized and flipped on the device; its slot given back."""
        encoded: EncodedImages = packed.images
        meta = encoded.meta
        data = torch.from_numpy(np.array(encoded.data[: encoded.used_bytes]))  # out of the slot: freed now
        packed.release()
        jpeg = np.flatnonzero(meta["kind"] == JPEG)
        spans = zip(meta["offset"][jpeg].tolist(), meta["length"][jpeg].tolist())
        done = decode_batch([data[o:o + n] for o, n in spans], self.device, self._decode)
        self.decoded_on_cpu += done.on_cpu
        images = torch.empty((len(meta), self.side, self.side, 3), dtype=torch.uint8, device=self.device)
        finished = np.flatnonzero(meta["kind"] != JPEG)
        for row in finished:  # the workers' own decodes: rare (not sequential JPEGs)
            start = int(meta["offset"][row])
            images[row] = data[start:start + self.side * self.side * 3].view(self.side, self.side, 3)
        self.finished_by_workers += len(finished)
        ok = [k for k in range(len(jpeg)) if done.images[k] is not None]
        if ok:
            rows = jpeg[ok]
            images[torch.from_numpy(rows).to(self.device)] = crop_resize_flip(
                [done.images[k] for k in ok], torch.from_numpy(meta["box"][rows]), torch.from_numpy(meta["flip"][rows]),
                self.side)
        keep = np.ones(len(meta), bool)
        skipped = list(packed.skipped)
        for k, reason in done.reasons.items():
            index = int(packed.indices[jpeg[k]])
            failure = sample_failure(self._on_error, self._source.path_of(index), reason)
            if failure is not None:
                raise failure
            keep[jpeg[k]] = False
            skipped.append((index, reason))
            self.failed += 1
        if not keep.all():
            images = images[torch.from_numpy(keep).to(self.device)]
        out = images.numpy() if self.device.type == "cpu" else images.cpu().numpy() if self.host else images
        return replace(packed, images=out, labels=packed.labels[keep], indices=packed.indices[keep], skipped=skipped,
                       lease=None, region=None, copied=False)

    def close(self) -> None:
        """Stop the workers and free their memory (idempotent)."""
        self._workers.close()


def make_nvjpeg_engine(source: SampleSource, options: LoaderOptions) -> NvjpegEngine:
    """An `nvjpeg` engine for `source` (JPEG datasets and folders)."""
    return NvjpegEngine(source, options)
