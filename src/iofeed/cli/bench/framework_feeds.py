"""Feeds of iofeed's tf and JAX adapters: the same work as the torch feed, as each framework's own
NHWC arrays, which the host only counts on the CPU. On a GPU the JAX feed's arrays (normalised
there by the adapter) reach the PyTorch model through DLPack, as NCHW channels_last views."""
from __future__ import annotations

import os
from collections.abc import Generator
from typing import Any

from .feed_classes import IofeedFeed
from .feeds import FeedSpec


class IofeedFrameworkFeed(IofeedFeed):
    """An iofeed feed of its line's `framework=` (jax or tf), on the framework's own device; a tf
    dataset is `.repeat()`-ed or iterated anew each epoch (as Keras `fit` does), as the subclass says."""

    new_iterators = False

    def __init__(self, spec: FeedSpec) -> None:
        # JAX takes 75% of the GPU's memory at its first array by default: the model beside it needs it
        os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")
        super().__init__(spec)
        self._to_torch = spec.device == "cuda"

    @staticmethod
    def run_keywords(spec: FeedSpec) -> dict[str, Any]:
        """The run's keywords but the device: tf and JAX place their arrays on their own default device."""
        keywords = IofeedFeed.run_keywords(spec)
        del keywords["placement"]
        return keywords

    def batches(self) -> Generator[tuple[Any, Any], None, None]:
        if self.made is self.loader:  # a Loader (jax)
            while True:
                for images, labels in self.loader:
                    yield (_torch_view(images, labels) if self._to_torch else (images, labels))
        elif self.new_iterators:
            while True:
                yield from self.made
        else:
            yield from self.made.repeat()


class IofeedTfEpochsFeed(IofeedFrameworkFeed):
    """The tf dataset iterated anew each epoch, as Keras `fit` does."""

    new_iterators = True


def _torch_view(images: Any, labels: Any) -> tuple[Any, Any]:
    """A JAX batch on the GPU as PyTorch tensors without a copy: NHWC is NCHW in channels_last."""
    from torch.utils.dlpack import from_dlpack

    return from_dlpack(images).permute(0, 3, 1, 2), from_dlpack(labels).long()
