"""The FFCV peer feed: the dataset's train images written once into FFCV's own format (a .beton of
JPEGs, quality 90, at most 256 px: what `iofeed preprocess` keeps) and read by FFCV's documented
ImageNet pipeline: random-resized-crop decoder, flip, ImageNet normalisation, float32 NCHW.

FFCV is an sdist that compiles against OpenCV and libjpeg-turbo found by pkg-config; where it is
not installed the line is refused in one line (`feeds.SAID`)."""
from __future__ import annotations

import shutil
import tempfile
from collections.abc import Generator
from pathlib import Path
from typing import Any

import numpy as np

from ...adapters.normalize import IMAGENET_MEAN, IMAGENET_STD
from ...image.pil import decode_rgb, open_image
from ...sources.samples import open_source
from .feeds import FeedSpec

QUALITY = 90
MAX_SIDE = 256


class DatasetImages:
    """The train split as FFCV's writer wants it: item i is (RGB uint8 HWC pixels, label)."""

    def __init__(self, dataset: str) -> None:
        self._source = open_source(dataset, "train")

    def __len__(self) -> int:
        return len(self._source)

    def __getitem__(self, index: int) -> tuple[np.ndarray, int]:
        source = self._source
        path = source.files[source.file_id[index]].decode("utf-8", "surrogateescape")
        with open(path, "rb") as file:
            file.seek(int(source.offset[index]))
            data = file.read(int(source.size[index]))
        return np.asarray(decode_rgb(open_image(data), (1, 1)).image), int(source.label[index])


def write_beton(dataset: str, path: Path, workers: int) -> int:
    """The train split of `dataset` as an FFCV file at `path`; the number of samples."""
    from ffcv.fields import IntField, RGBImageField
    from ffcv.writer import DatasetWriter

    images = DatasetImages(dataset)
    writer = DatasetWriter(str(path), {"image": RGBImageField(write_mode="jpg", max_resolution=MAX_SIDE,
                                                              jpeg_quality=QUALITY),
                                       "label": IntField()}, num_workers=workers)
    writer.from_indexed_dataset(images)
    return len(images)


class FfcvFeed:
    """FFCV's Loader over the .beton: `RandomResizedCropRGBImageDecoder` (scale 0.08-1, ratio
    3/4-4/3), `RandomHorizontalFlip`, `ToTensor`, `ToTorchImage`, `NormalizeImage` (float32),
    random order, `spec.workers` threads, the file in the page cache (`os_cache=True`)."""

    def __init__(self, spec: FeedSpec) -> None:
        import torch
        from ffcv.fields.decoders import IntDecoder, RandomResizedCropRGBImageDecoder
        from ffcv.loader import Loader, OrderOption
        from ffcv.transforms import NormalizeImage, RandomHorizontalFlip, Squeeze, ToDevice, ToTensor, ToTorchImage

        self._folder = Path(tempfile.mkdtemp(prefix="iofeed-ffcv-"))
        try:
            beton = self._folder / "train.beton"
            samples = write_beton(spec.source, beton, spec.workers)
            device = torch.device(spec.device)
            mean, std = np.asarray(IMAGENET_MEAN) * 255, np.asarray(IMAGENET_STD) * 255
            image = [RandomResizedCropRGBImageDecoder((spec.image_size, spec.image_size)), RandomHorizontalFlip(),
                     ToTensor(), ToDevice(device, non_blocking=True), ToTorchImage(),
                     NormalizeImage(mean, std, np.float32)]
            label = [IntDecoder(), ToTensor(), Squeeze(), ToDevice(device, non_blocking=True)]
            self._loader = Loader(str(beton), batch_size=spec.batch_size, num_workers=spec.workers,
                                  order=OrderOption.RANDOM, drop_last=True, os_cache=True, seed=spec.seed,
                                  pipelines={"image": image, "label": label})
        except BaseException:
            shutil.rmtree(self._folder, ignore_errors=True)
            raise
        self.capacity = 3  # FFCV's default batches_ahead
        self.settings: dict[str, Any] = {"num_workers": spec.workers, "samples": samples, "jpeg_quality": QUALITY,
                                         "max_resolution": MAX_SIDE}

    def batches(self) -> Generator[tuple[Any, Any], None, None]:
        while True:
            yield from self._loader

    def close(self) -> None:
        self._loader = None
        shutil.rmtree(self._folder, ignore_errors=True)
