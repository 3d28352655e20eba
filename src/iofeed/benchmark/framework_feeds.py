"""Feeds of iofeed's tf and JAX adapters: the same work as the torch feed, as each framework's own
NHWC arrays, which the host only counts on the CPU. On a GPU the JAX feed's arrays (normalised
there by the adapter) reach the PyTorch model through DLPack, as NCHW channels_last views."""
from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

from .feeds import FeedSpec


class IofeedFrameworkFeed:
    """`iofeed.loader(framework=spec.entry.framework)`; a tf dataset is either `.repeat()`-ed or
    iterated anew each epoch (as Keras `fit` does), as the subclass says."""

    new_iterators = False

    def __init__(self, spec: FeedSpec) -> None:
        # JAX takes 75% of the GPU's memory at its first array by default: the model beside it needs it
        os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")
        import iofeed

        self._made = iofeed.loader(spec.source, split="train", batch_size=spec.batch_size,
                                   image_size=spec.image_size, framework=spec.entry.framework, workers=spec.workers,
                                   seed=spec.seed)
        self._to_torch = spec.device == "cuda"
        self._loader = getattr(self._made, "iofeed_loader", self._made)
        self.settings = dict(self._loader.stats.settings)
        self.capacity = int(self.settings.get("prefetch_batches", 2))

    def batches(self) -> Iterator[tuple[Any, Any]]:
        if self._made is self._loader:  # a Loader (jax)
            while True:
                for images, labels in self._loader:
                    yield (_torch_view(images, labels) if self._to_torch else (images, labels))
        elif self.new_iterators:
            while True:
                yield from self._made
        else:
            yield from self._made.repeat()

    def close(self) -> None:
        self._loader.close()


class IofeedTfEpochsFeed(IofeedFrameworkFeed):
    """The tf dataset iterated anew each epoch, as Keras `fit` does."""

    new_iterators = True


def _torch_view(images: Any, labels: Any) -> tuple[Any, Any]:
    """A JAX batch on the GPU as PyTorch tensors without a copy: NHWC is NCHW in channels_last."""
    import torch

    return torch.from_dlpack(images).permute(0, 3, 1, 2), torch.from_dlpack(labels).long()
