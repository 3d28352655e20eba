"""The feed classes the catalogue's lines name, each built from its line (`FeedDecl`) and the run's
settings alone: the DataLoader, iofeed's loader, and the synthetic ceiling."""
from __future__ import annotations

import multiprocessing
from collections.abc import Generator, Iterator
from contextlib import ExitStack
from typing import Any

from ...errors import FeedUnavailable
from ...options.groups import Placement
from .feeds import FeedSpec
from .recipe import in_dataloader, in_iofeed
from .sources import SOURCES

PREFETCH_FACTOR = 2  # the DataLoader's default


class TorchvisionFeed:
    """Plain torchvision: ImageFolder + the recipe's transforms + DataLoader (forkserver workers)."""

    def __init__(self, spec: FeedSpec) -> None:
        import torch
        from torchvision import datasets

        from ...sources.folder_scan import find_class_root

        recipe = in_dataloader(spec.entry.recipe, spec.image_size, spec.classes)
        torch.manual_seed(spec.seed)
        self._device = torch.device(spec.device)
        dataset = datasets.ImageFolder(str(find_class_root(spec.source)), transform=recipe["transform"])
        # a fork server that imports torch and torchvision once, rather than each worker at start-up
        # (the baseline's warm-up: docs/benchmarks.md, "The GPU check")
        context = multiprocessing.get_context("forkserver")
        context.set_forkserver_preload(["torch", "torchvision.datasets", "torchvision.transforms", "PIL.Image"])
        self._loader: torch.utils.data.DataLoader[Any] | None = torch.utils.data.DataLoader(
            dataset, batch_size=spec.batch_size, shuffle=True, drop_last=True, num_workers=spec.workers,
            multiprocessing_context=context, persistent_workers=True, prefetch_factor=PREFETCH_FACTOR,
            pin_memory=self._device.type == "cuda", collate_fn=recipe["collate_fn"],
        )
        # starts the workers now, beside the other hosts' start-ups
        self._epoch: Iterator[Any] | None = iter(self._loader)
        self.capacity = spec.workers * PREFETCH_FACTOR
        self.settings = {"workers": spec.workers, "prefetch_factor": PREFETCH_FACTOR, "samples": len(dataset)}

    def batches(self) -> Generator[tuple[Any, Any], None, None]:
        while True:
            assert self._loader is not None and self._epoch is not None, "the feed is closed"
            for images, labels in self._epoch:
                yield images.to(self._device, non_blocking=True), labels.to(self._device, non_blocking=True)
            self._epoch = iter(self._loader)  # persistent workers: the same processes

    def close(self) -> None:
        self._loader = self._epoch = None  # persistent workers stop with their iterator


class IofeedFeed:
    """`iofeed.loader(source, **the line's keywords, **the run's)`: the source and any keywords it
    adds as the line's `source` form gives them, and the keywords of the line's `recipe`."""

    def __init__(self, spec: FeedSpec) -> None:
        import iofeed

        declared = spec.entry
        self._made = ExitStack()  # what the source form made for this feed, removed at close
        try:
            source, given = SOURCES[declared.source].make(spec, self._made)
            self.made = iofeed.loader(source, **declared.keywords, **given, **in_iofeed(declared.recipe, spec.classes),
                                      **self.run_keywords(spec))
        except BaseException:
            self._made.close()
            raise
        self.loader = getattr(self.made, "iofeed_loader", self.made)  # a tf dataset's Loader
        self.settings = dict(self.loader.stats.settings)
        self.capacity = int(self.settings.get("prefetch_batches", 2))
        asked = declared.keywords.get("engine", self.settings.get("engine"))
        if self.settings.get("engine") != asked:
            self.close()
            raise FeedUnavailable(f"iofeed.loader(engine={asked!r}) built the {self.settings.get('engine')!r} "
                                  f"engine: the {asked} engine is not available")

    @staticmethod
    def run_keywords(spec: FeedSpec) -> dict[str, Any]:
        """What every iofeed feed of the run is given: its split, sizes, device, workers and seed."""
        return {"split": "train", "batch_size": spec.batch_size, "image_size": spec.image_size,
                "placement": Placement(device=spec.device), "workers": spec.workers, "seed": spec.seed}

    def batches(self) -> Generator[tuple[Any, Any], None, None]:
        while True:
            yield from self.loader

    def close(self) -> None:
        self.loader.close()
        self._made.close()


class SyntheticFeed:
    """The same random batch again and again, already on the device: the training ceiling."""

    def __init__(self, spec: FeedSpec) -> None:
        import torch

        generator = torch.Generator().manual_seed(spec.seed)
        shape = (spec.batch_size, 3, spec.image_size, spec.image_size)
        images = torch.randn(shape, generator=generator).contiguous(memory_format=torch.channels_last)
        labels = torch.randint(0, spec.classes, (spec.batch_size,), generator=generator)
        self._batch: tuple[torch.Tensor, torch.Tensor] | None = (images.to(spec.device), labels.to(spec.device))
        self.capacity = 0
        self.settings: dict[str, Any] = {}

    def batches(self) -> Generator[tuple[Any, Any], None, None]:
        while True:
            assert self._batch is not None, "the feed is closed"
            yield self._batch

    def close(self) -> None:
        self._batch = None
