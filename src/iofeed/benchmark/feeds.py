"""The loaders under test ("feeds"): each yields (float normalised NCHW images, int64 labels) forever.

Every feed does the same work: 224 px random-resized-crop (area 0.08–1, ratio 3/4–4/3),
horizontal flip, ImageNet normalisation, batches of the same size, on the same device. The
recipe pair adds torchvision's reference recipe (`recipe.py`); its labels are soft (MixUp/CutMix).
"""
from __future__ import annotations

import importlib.util
import multiprocessing
import shutil
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from ..adapters.normalize import IMAGENET_MEAN, IMAGENET_STD
from ..errors import FeedUnavailable
from ..registry import Entry, Registry

BASELINE = "torchvision-Nw"
RECIPE_BASELINE = "torchvision-recipe"  # what the recipe feeds are compared with: the same recipe, torchvision's way
CEILING = "synthetic"


@dataclass(frozen=True)
class FeedCaps:
    """What the catalogue says of a feed: its kind, which form of the data it reads, what it needs."""

    kind: str  # "torchvision", "iofeed", "dali-peer" or "synthetic"
    reads: str  # "folder", "dataset" (JPEG), "raw" (raw pixels) or "" (synthetic)
    about: str
    needs_dali: bool = False
    gpu_augment: bool = False  # crop, resize and flip on the GPU (needs one)
    workers: int | None = None  # a fixed worker count (otherwise `--workers`)
    stream: str = ""  # streamed from the local S3 endpoint: "cold" (10% cache) or "warm" (all cached)
    recipe: bool = False  # torchvision's reference recipe (`benchmark/recipe.py`) instead of crop + flip
    framework: str = "torch"  # what it yields; other than torch: CPU only, no model, not in the default set
    needs: str = ""  # a module it imports (a feed without it is skipped)
    mixture: bool = False  # the dataset read as a 3-source iofeed.Mix (`mixed_views`)
    default: bool = True  # run without `--feeds` (when its framework is torch)


_HERE = "iofeed.benchmark.feeds"
_FRAMEWORKS = "iofeed.benchmark.framework_feeds"
# Every feed, in table order; an entry's target is the feed class, built as `target(spec)`.
FEEDS: Registry[FeedCaps] = Registry("feed", {
    "torchvision-1w": Entry(f"{_HERE}:TorchvisionFeed",
                            FeedCaps("torchvision", "folder", "torchvision ImageFolder + DataLoader, 1 worker",
                                     workers=1)),
    "torchvision-Nw": Entry(f"{_HERE}:TorchvisionFeed",
                            FeedCaps("torchvision", "folder", "torchvision ImageFolder + DataLoader, all cores")),
    "iofeed-folder": Entry(f"{_HERE}:IofeedFeed",
                           FeedCaps("iofeed", "folder", "iofeed workers engine on the JPEG folder")),
    "iofeed-dataset": Entry(f"{_HERE}:IofeedFeed",
                            FeedCaps("iofeed", "dataset", "iofeed workers engine on the preprocessed dataset")),
    "iofeed-raw": Entry(f"{_HERE}:IofeedFeed",
                        FeedCaps("iofeed", "raw", "iofeed workers engine on the raw-pixel dataset (--format raw)")),
    "iofeed-raw-gpu": Entry(f"{_HERE}:IofeedFeed",
                            FeedCaps("iofeed", "raw", "iofeed on the raw-pixel dataset, crop/resize/flip on the GPU",
                                     gpu_augment=True)),
    "iofeed-s3-cold": Entry(f"{_HERE}:IofeedFeed",
                            FeedCaps("iofeed", "dataset", "iofeed workers engine streaming the dataset from a local "
                                     "S3 endpoint, cache of 10% (shards fetched all along)", stream="cold")),
    "iofeed-s3-warm": Entry(f"{_HERE}:IofeedFeed",
                            FeedCaps("iofeed", "dataset", "iofeed workers engine on the dataset's URL, every shard "
                                     "already in the node cache", stream="warm")),
    "iofeed-jax": Entry(f"{_FRAMEWORKS}:IofeedFrameworkFeed",
                        FeedCaps("iofeed", "dataset", "iofeed workers engine on the preprocessed dataset, "
                                 "framework='jax' (sharded jax.Array, NHWC)", framework="jax", needs="jax")),
    "iofeed-tf": Entry(f"{_FRAMEWORKS}:IofeedFrameworkFeed",
                       FeedCaps("iofeed", "dataset", "iofeed workers engine on the preprocessed dataset, "
                                "framework='tf', one .repeat() iterator", framework="tf", needs="tensorflow")),
    "iofeed-tf-epochs": Entry(f"{_FRAMEWORKS}:IofeedTfEpochsFeed",
                              FeedCaps("iofeed", "dataset", "iofeed's tf dataset, a new iterator each epoch (as "
                                       "Keras fit)", framework="tf", needs="tensorflow")),
    "grain": Entry("iofeed.benchmark.grain_feed:GrainFeed",
                   FeedCaps("grain", "dataset", "Grain DataLoader over the dataset's JPEG bytes, Pillow decode",
                            framework="numpy", needs="grain")),
    "iofeed-mix": Entry(f"{_HERE}:IofeedFeed",
                        FeedCaps("iofeed", "dataset", "iofeed workers engine on a 3-source iofeed.Mix of the dataset "
                                 "(three names, weights 0.5/0.3/0.2, an epoch of its size): what mixing costs beside "
                                 "iofeed-dataset", mixture=True, default=False)),
    "iofeed-dali": Entry(f"{_HERE}:IofeedFeed",
                         FeedCaps("iofeed", "dataset", "iofeed DALI backend on the preprocessed dataset", True)),
    "torchvision-recipe": Entry(f"{_HERE}:TorchvisionFeed",
                                FeedCaps("torchvision", "folder", "torchvision reference recipe (TrivialAugmentWide, "
                                         "RandomErasing, MixUp/CutMix) in the DataLoader, all cores", recipe=True)),
    "iofeed-recipe": Entry(f"{_HERE}:IofeedFeed",
                           FeedCaps("iofeed", "dataset", "the same recipe with iofeed: transform= in its workers, "
                                    "MixUp/CutMix as batch_transform= on the device", recipe=True)),
    "dali-folder": Entry("iofeed.benchmark.dali_peer:DaliFolderFeed",
                         FeedCaps("dali-peer", "folder", "plain DALI pipeline on the JPEG folder", True)),
    CEILING: Entry(f"{_HERE}:SyntheticFeed",
                   FeedCaps("synthetic", "", "synthetic tensors already on the device (the ceiling)")),
})
def baseline_of(name: str) -> str:
    """The feed a feed's ratio is against: the recipe feeds against each other (torchvision's recipe
    feed), every other feed against the plain DataLoader."""
    return RECIPE_BASELINE if name in FEEDS and FEEDS.caps(name).recipe else BASELINE


CATALOGUE = tuple(name for name in FEEDS.names() if name != CEILING)  # the feeds `--feeds` may name
DEFAULT_FEEDS = tuple(name for name in CATALOGUE  # without `--feeds`
                      if FEEDS.caps(name).framework == "torch" and FEEDS.caps(name).default)


@dataclass(frozen=True)
class FeedSpec:
    """Everything a host process needs to build one feed (picklable)."""

    name: str
    source: str  # folder or dataset path ("" for synthetic)
    workers: int
    batch_size: int
    image_size: int
    device: str  # "cpu" or "cuda"
    seed: int = 0
    model: str = "none"
    classes: int = 1000
    endpoint: str = ""  # the local S3 endpoint of a streaming feed (`source` is then its URL)
    cache_root: str = ""  # the bench's own cache folder, where a streaming feed makes its cache

    @property
    def entry(self) -> FeedCaps:
        """What the catalogue says of this feed."""
        return FEEDS.caps(self.name)


class Feed(Protocol):
    """A running feed."""

    capacity: int  # batches it may hold ready before the consumer asks (its prefetch buffer)
    settings: dict[str, Any]

    def batches(self) -> Iterator[tuple[Any, Any]]:
        """(images float NCHW, labels int64) on the feed's device, epoch after epoch."""

    def close(self) -> None:
        """Stop workers and threads."""


def dali_installed() -> bool:
    """Whether NVIDIA DALI can be imported."""
    return importlib.util.find_spec("nvidia") is not None and importlib.util.find_spec("nvidia.dali") is not None


def open_feed(spec: FeedSpec) -> Feed:
    """Build the feed `spec` names (in the calling process); FeedUnavailable if it cannot run."""
    if spec.entry.needs_dali and not dali_installed():
        raise FeedUnavailable("NVIDIA DALI is not installed")
    if spec.entry.needs and importlib.util.find_spec(spec.entry.needs) is None:
        raise FeedUnavailable(f"{spec.entry.needs} is not installed")
    reaches_torch = spec.entry.framework == "torch" or spec.entry.framework == "jax" and spec.device == "cuda"
    if not reaches_torch and (spec.device != "cpu" or spec.model != "none"):
        raise FeedUnavailable(f"a {spec.entry.framework} feed is measured on the CPU without a model only "
                              "(the model step is PyTorch's; JAX's GPU arrays reach it through DLPack)")
    return FEEDS[spec.name].load()(spec)


class TorchvisionFeed:
    """Plain torchvision: ImageFolder + standard transforms + DataLoader (forkserver workers)."""

    def __init__(self, spec: FeedSpec) -> None:
        import torch
        from torchvision import datasets, transforms

        from ..prepare.scan import find_class_root

        transform = transforms.Compose([
            transforms.RandomResizedCrop(spec.image_size),
            transforms.RandomHorizontalFlip(),
            transforms.ToTensor(),
            transforms.Normalize(IMAGENET_MEAN, IMAGENET_STD),
        ])
        collate = None
        if spec.entry.recipe:
            from .recipe import MixingCollate, reference_transform

            transform, collate = reference_transform(spec.image_size), MixingCollate(spec.classes)
        torch.manual_seed(spec.seed)
        self._device = torch.device(spec.device)
        dataset = datasets.ImageFolder(str(find_class_root(spec.source)), transform=transform)
        # a fork server that imports torch and torchvision once, rather than each worker at start-up
        # (the baseline's warm-up: docs/benchmarks.md, "The GPU check")
        context = multiprocessing.get_context("forkserver")
        context.set_forkserver_preload(["torch", "torchvision.datasets", "torchvision.transforms", "PIL.Image"])
        self._loader = torch.utils.data.DataLoader(
            dataset, batch_size=spec.batch_size, shuffle=True, drop_last=True, num_workers=spec.workers,
            multiprocessing_context=context, persistent_workers=True, prefetch_factor=2,
            pin_memory=self._device.type == "cuda", collate_fn=collate,
        )
        self._epoch = iter(self._loader)  # starts the workers now, beside the other hosts' start-ups
        self.capacity = spec.workers * 2
        self.settings = {"workers": spec.workers, "prefetch_factor": 2, "samples": len(dataset)}

    def batches(self) -> Iterator[tuple[Any, Any]]:
        while True:
            for images, labels in self._epoch:
                yield images.to(self._device, non_blocking=True), labels.to(self._device, non_blocking=True)
            self._epoch = iter(self._loader)  # persistent workers: the same processes

    def close(self) -> None:
        self._loader = self._epoch = None  # persistent workers stop with their iterator


class IofeedFeed:
    """`iofeed.loader(..., framework="torch")` with the workers or the DALI backend."""

    def __init__(self, spec: FeedSpec) -> None:
        import iofeed

        backend = "dali" if spec.entry.needs_dali else "workers"
        streaming: dict[str, Any] = {}
        if spec.entry.stream:
            from .stream import stream_options, use_endpoint

            use_endpoint(spec.endpoint)
            streaming = stream_options(spec.source, spec.entry.stream, Path(spec.cache_root))
        recipe: dict[str, Any] = {}
        if spec.entry.recipe:
            from .recipe import iofeed_transform, mix

            recipe = {"transform": iofeed_transform(), "batch_transform": mix(spec.classes)}
        self._cache_dir = streaming.get("cache_dir")
        self._views = tempfile.mkdtemp(prefix="iofeed-mix-") if spec.entry.mixture else None
        try:
            source = mixed_views(spec.source, self._views) if self._views else spec.source
            self._loader = iofeed.loader(
                source, split="train", batch_size=spec.batch_size, image_size=spec.image_size,
                framework="torch", device=spec.device, backend=backend, workers=spec.workers, seed=spec.seed,
                gpu_augment=spec.entry.gpu_augment, memory_format="channels_last",  # the bench's model is
                **streaming, **recipe,
            )
        except BaseException:
            self._remove_cache()
            raise
        self.settings = dict(self._loader.stats.settings)
        if self.settings.get("backend") != backend:
            self.close()
            raise FeedUnavailable(f"iofeed.loader(backend={backend!r}) built the "
                                  f"{self.settings.get('backend')!r} backend: the {backend} backend is not available")
        self.capacity = int(self.settings.get("prefetch_batches", 2))

    def batches(self) -> Iterator[tuple[Any, Any]]:
        while True:
            yield from self._loader

    def close(self) -> None:
        self._loader.close()
        self._remove_cache()

    def _remove_cache(self) -> None:
        """The feed's own folders: a streamed feed's cache, the mixture feed's symlinks."""
        for folder in (self._cache_dir, self._views):
            if folder is not None:
                shutil.rmtree(folder, ignore_errors=True)


def mixed_views(dataset: str, folder: str) -> Any:
    """`dataset` as a 3-source `iofeed.Mix`: three symlinks to it in `folder`, weighted 0.5/0.3/0.2,
    an epoch as long as the dataset's train split. The same files and decoding as iofeed-dataset,
    so the difference between the two feeds is what the mixture costs."""
    import iofeed

    from ..format.manifest import Manifest

    samples = Manifest.read(Path(dataset)).split("train", dataset).samples
    views = []
    for k in range(3):
        view = Path(folder) / f"source{k}.iof"
        view.symlink_to(Path(dataset).resolve(), target_is_directory=True)
        views.append(str(view))
    return iofeed.Mix(dict(zip(views, (0.5, 0.3, 0.2))), epoch_samples=samples)


class SyntheticFeed:
    """The same random batch again and again, already on the device: the training ceiling."""

    def __init__(self, spec: FeedSpec) -> None:
        import torch

        generator = torch.Generator().manual_seed(spec.seed)
        shape = (spec.batch_size, 3, spec.image_size, spec.image_size)
        images = torch.randn(shape, generator=generator).contiguous(memory_format=torch.channels_last)
        labels = torch.randint(0, spec.classes, (spec.batch_size,), generator=generator)
        self._batch = (images.to(spec.device), labels.to(spec.device))
        self.capacity = 0
        self.settings: dict[str, Any] = {}

    def batches(self) -> Iterator[tuple[Any, Any]]:
        while True:
            yield self._batch

    def close(self) -> None:
        self._batch = None
