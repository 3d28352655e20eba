"""The Grain peer feed: Grain's documented `DataLoader` pipeline over the dataset's JPEG bytes (CPU)."""
from __future__ import annotations

import io
import os
from collections.abc import Generator
from typing import Any

import grain
import numpy as np
from absl import flags
from PIL import Image

from ...adapters.normalize import IMAGENET_MEAN, IMAGENET_STD
from ...image.boxes import Augment
from ...sources.samples import open_source
from .feeds import FeedSpec


class GrainFeed:
    """Grain's documented pipeline: `grain.DataLoader` over a random-access source of the dataset's
    JPEG bytes, an index sampler shuffling each epoch, a random map (Pillow decode, random-resized
    crop, flip, normalisation) and `Batch`, in worker processes, with its line's `worker_buffer_size`
    (batches each worker keeps ready) and `read_threads` (`ReadOptions.num_threads`)."""

    def __init__(self, spec: FeedSpec) -> None:
        if not flags.FLAGS.is_parsed():  # Grain reads absl flags, parsed by absl.app in Grain's own programs
            flags.FLAGS.mark_as_parsed()
        source = open_source(spec.source, "train")
        records = JpegRecords([bytes(f).decode() for f in source.files], source.file_id, source.offset, source.size,
                              source.label)
        sampler = grain.samplers.IndexSampler(len(records), shuffle=True, seed=spec.seed, num_epochs=None,
                                              shard_options=grain.sharding.NoSharding())
        buffer, threads = spec.entry.keywords["worker_buffer_size"], spec.entry.keywords["read_threads"]
        self._loader = grain.DataLoader(
            data_source=records, sampler=sampler,
            operations=[DecodeAugment(spec.image_size), grain.transforms.Batch(spec.batch_size, drop_remainder=True)],
            worker_count=spec.workers, worker_buffer_size=buffer, read_options=grain.ReadOptions(num_threads=threads),
        )
        self.capacity = spec.workers * buffer
        self.settings = {"worker_count": spec.workers, "worker_buffer_size": buffer, "read_threads": threads,
                         "samples": len(records)}

    def batches(self) -> Generator[tuple[Any, Any], None, None]:
        for batch in self._loader:
            yield batch["image"], batch["label"]

    def close(self) -> None:
        self._loader = None


class JpegRecords:
    """Grain random-access source: record i is {"jpeg": bytes, "label": int} from the dataset's shards
    (picklable: each worker opens the shard files itself)."""

    def __init__(self, paths: list[str], file_id: np.ndarray, offset: np.ndarray, size: np.ndarray,
                 label: np.ndarray) -> None:
        self._paths, self._file_id, self._offset, self._size, self._label = paths, file_id, offset, size, label
        self._files: dict[int, Any] = {}

    def __len__(self) -> int:
        return len(self._label)

    def __getitem__(self, index: int) -> dict[str, Any]:
        file_id = int(self._file_id[index])
        if file_id not in self._files:  # kept open for the run; pread: Grain reads from several threads
            self._files[file_id] = os.open(self._paths[file_id], os.O_RDONLY)
        data = os.pread(self._files[file_id], int(self._size[index]), int(self._offset[index]))
        return {"jpeg": data, "label": int(self._label[index])}

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_files": {}}


class DecodeAugment(grain.transforms.RandomMap):  # type: ignore[misc]  # grain ships no types: Any
    """Pillow decode, the loaders' random-resized crop and flip (iofeed's box sampling, Pillow's
    antialiased bilinear resize), ImageNet normalisation to float32 HWC."""

    def __init__(self, size: int) -> None:
        self._augment = Augment(size=size, train=True)
        self._size = size
        self._mean = np.asarray(IMAGENET_MEAN, np.float32) * 255
        self._scale = 1 / (np.asarray(IMAGENET_STD, np.float32) * 255)

    def random_map(self, element: dict[str, Any], rng: np.random.Generator) -> dict[str, Any]:
        image = Image.open(io.BytesIO(element["jpeg"])).convert("RGB")
        box, flip = self._augment.box(image.width, image.height, rng)
        image = image.resize((self._size, self._size), Image.Resampling.BILINEAR, box=box)
        if flip:
            image = image.transpose(Image.Transpose.FLIP_LEFT_RIGHT)
        pixels = (np.asarray(image, np.float32) - self._mean) * self._scale
        return {"image": pixels, "label": element["label"]}
