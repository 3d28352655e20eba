"""The peer a careful user would write with DALI alone: file reader → random-crop decode → resize
→ flip + normalise, on the raw JPEG folder. CPU decode without a GPU, `mixed` (nvJPEG) with one."""
from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from ..system import usable_cores
from .feeds import MEAN, STD, FeedSpec

PREFETCH_QUEUE_DEPTH = 2


def _pipeline(files: list[str], labels: list[int], spec: FeedSpec, threads: int) -> Any:
    """The DALI pipeline, built (not yet run)."""
    from nvidia.dali import fn, pipeline_def, types

    gpu = spec.device == "cuda"

    @pipeline_def
    def peer() -> tuple[Any, Any]:
        jpegs, classes = fn.readers.file(files=files, labels=labels, random_shuffle=True, name="Reader")
        images = fn.decoders.image_random_crop(
            jpegs, device="mixed" if gpu else "cpu", output_type=types.RGB,
            random_area=[0.08, 1.0], random_aspect_ratio=[3 / 4, 4 / 3],
        )
        images = fn.resize(images, resize_x=spec.image_size, resize_y=spec.image_size)
        images = fn.crop_mirror_normalize(
            images, dtype=types.FLOAT, output_layout="CHW", mirror=fn.random.coin_flip(),
            mean=[m * 255 for m in MEAN], std=[s * 255 for s in STD],
        )
        return images, classes

    pipe = peer(batch_size=spec.batch_size, num_threads=threads, device_id=0 if gpu else None,
                seed=spec.seed, prefetch_queue_depth=PREFETCH_QUEUE_DEPTH)
    pipe.build()
    return pipe


class DaliFolderFeed:
    """The DALI peer behind DALI's own PyTorch iterator."""

    def __init__(self, spec: FeedSpec) -> None:
        import torch
        from nvidia.dali.plugin.pytorch import DALIGenericIterator, LastBatchPolicy

        from ..prepare.scan import scan_folder

        scan = scan_folder(spec.source)  # the same accepted files as the other folder feeds
        files = [str(scan.root / f) for f in scan.files]
        threads = spec.workers or usable_cores().amount
        pipe = _pipeline(files, scan.labels, spec, threads)
        self._iterator = DALIGenericIterator([pipe], ["images", "labels"], reader_name="Reader",
                                             last_batch_policy=LastBatchPolicy.DROP, auto_reset=True)
        self._torch = torch
        self.capacity = PREFETCH_QUEUE_DEPTH + 1  # the pipeline's queue and the iterator's batch in hand
        self.settings = {"threads": threads, "prefetch_queue_depth": PREFETCH_QUEUE_DEPTH,
                         "decode": "mixed" if spec.device == "cuda" else "cpu", "samples": len(files)}

    def batches(self) -> Iterator[tuple[Any, Any]]:
        while True:
            for out in self._iterator:
                labels = out[0]["labels"].reshape(-1).to(self._torch.int64)
                yield out[0]["images"], labels

    def close(self) -> None:
        self._iterator = None
