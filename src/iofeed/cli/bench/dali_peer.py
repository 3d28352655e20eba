"""The peer a careful user would write with DALI alone: file reader → random-crop decode → resize
→ flip + normalise, on the raw JPEG folder. CPU decode without a GPU, `mixed` (nvJPEG) with one."""
from __future__ import annotations

from collections.abc import Generator
from typing import TYPE_CHECKING, Any, cast

import numpy as np

from ...adapters.normalize import IMAGENET_MEAN, IMAGENET_STD
from ...runtime.gpu.streams import consumer_stream
from ...runtime.system import usable_cores
from .feeds import FeedSpec

if TYPE_CHECKING:
    from nvidia.dali.data_node import DataNode


def _pipeline(files: list[str], labels: list[int], spec: FeedSpec, threads: int) -> Any:
    """The DALI pipeline, built (not yet run)."""
    from nvidia.dali import fn, types
    from nvidia.dali.pipeline import pipeline_def

    gpu = spec.device == "cuda"

    @pipeline_def
    def peer() -> tuple[Any, Any]:
        jpegs, classes = fn.readers.file(files=files, labels=labels, random_shuffle=True, name="Reader")
        images = fn.decoders.image_random_crop(
            jpegs, device="mixed" if gpu else "cpu", output_type=types.DALIImageType.RGB,
            random_area=[0.08, 1.0], random_aspect_ratio=[3 / 4, 4 / 3],
        )
        # one input, so one output node
        images = cast("DataNode", fn.resize(images, resize_x=spec.image_size, resize_y=spec.image_size))
        images = fn.crop_mirror_normalize(
            images, dtype=types.DALIDataType.FLOAT, output_layout="CHW", mirror=fn.random.coin_flip(),
            mean=[m * 255 for m in IMAGENET_MEAN], std=[s * 255 for s in IMAGENET_STD],
        )
        return images, classes

    pipe = peer(batch_size=spec.batch_size, num_threads=threads, device_id=0 if gpu else None,
                seed=spec.seed, prefetch_queue_depth=spec.entry.keywords["prefetch_queue_depth"],
                exec_dynamic=True)  # run(stream) binds outputs to the stream only with this executor
    pipe.build()  # type: ignore[no-untyped-call]  # DALI's Pipeline.build is not annotated
    return pipe


class DaliFolderFeed:
    """The DALI peer, run as DALI's own PyTorch iterator would run it, outputs bound to PyTorch's stream.

    `pipe.run(stream)` with PyTorch's current stream (as the `dali` engine does): without it DALI
    may free an output before kernels queued on that stream have read it. The file reader loops
    over the folder by itself, so batches continue across epochs. Its line gives `prefetch_queue_depth`.
    """

    def __init__(self, spec: FeedSpec) -> None:
        import torch

        from ...sources.folder_scan import scan_folder

        scan = scan_folder(spec.source)  # the same accepted files as the other folder feeds
        files = [str(scan.root / f) for f in scan.files]
        threads = spec.workers or usable_cores().amount
        self._pipe = _pipeline(files, scan.labels, spec, threads)
        self._device_id = 0 if spec.device == "cuda" else None
        self._torch = torch
        self.capacity = spec.entry.keywords["prefetch_queue_depth"]  # the pipeline's queue
        self.settings = {"threads": threads, "prefetch_queue_depth": self.capacity,
                         "decode": "mixed" if spec.device == "cuda" else "cpu", "samples": len(files)}

    def batches(self) -> Generator[tuple[Any, Any], None, None]:
        torch = self._torch
        while True:
            images, classes = self._pipe.run(consumer_stream(self._device_id))
            labels = torch.from_numpy(np.asarray(classes.as_tensor())).reshape(-1).to(torch.int64)
            if self._device_id is None:  # zero-copy: the array holds DALI's output alive, as the engine's do
                yield torch.from_numpy(np.asarray(images.as_tensor())), labels
            else:
                yield torch.from_dlpack(images.as_tensor()), labels

    def close(self) -> None:
        pipe, self._pipe = self._pipe, None
        if pipe is not None:
            getattr(pipe, "_shutdown", lambda: None)()
