"""The adapter interface: one batch to framework objects, and what `iofeed.loader` hands the caller."""
from __future__ import annotations

from collections.abc import Iterator
from typing import Any, Protocol

from ..engines.base import Batch, Engine


class EpochLoader(Protocol):
    """The part of `Loader` an adapter that wraps it relies on."""

    epoch: int
    image_size: int
    engine: Engine

    def __iter__(self) -> Iterator[Any]: ...

    def set_epoch(self, epoch: int) -> None: ...


class Adapter(Protocol):
    """Turns engine batches into one framework's objects; built by `from_options(options)`."""

    def __call__(self, batch: Batch) -> Any:
        """One batch as the framework's (images, labels)."""

    def wrap(self, loader: EpochLoader) -> Any:
        """What `iofeed.loader` returns over `loader` (the Loader itself, or a framework dataset)."""
