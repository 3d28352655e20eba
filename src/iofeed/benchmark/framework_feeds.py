"""Feeds of iofeed's tf and JAX adapters (CPU, no model): the same work as the torch feed,
as each framework's own NHWC arrays, which the host only counts."""
from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from .feeds import FeedSpec


class IofeedFrameworkFeed:
    """`iofeed.loader(framework=spec.entry.framework)`; a tf dataset is either `.repeat()`-ed or
    iterated anew each epoch (as Keras `fit` does), as the subclass says."""

    new_iterators = False

    def __init__(self, spec: FeedSpec) -> None:
        import iofeed

        self._made = iofeed.loader(spec.source, split="train", batch_size=spec.batch_size,
                                   image_size=spec.image_size, framework=spec.entry.framework, workers=spec.workers,
                                   seed=spec.seed)
        self._loader = getattr(self._made, "iofeed_loader", self._made)
        self.settings = dict(self._loader.stats.settings)
        self.capacity = int(self.settings.get("prefetch_batches", 2))

    def batches(self) -> Iterator[tuple[Any, Any]]:
        if self._made is self._loader:  # a Loader (jax)
            while True:
                yield from self._loader
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
