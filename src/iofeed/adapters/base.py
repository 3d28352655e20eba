"""The adapter interface: one batch to framework objects, and what `iofeed.loader` hands the caller."""
from __future__ import annotations

from collections.abc import Generator
from typing import Any, Protocol

from ..engines.base import Batch, Engine
from ..options.loader_options import LoaderOptions
from ..sources.samples import SampleSource


class EpochLoader(Protocol):
    """The part of `Loader` an adapter that wraps it relies on."""

    epoch: int
    image_size: int
    engine: Engine
    options: LoaderOptions
    source: SampleSource

    def __iter__(self) -> Generator[Any, None, None]: ...  # a generator: a wrapper closes a pass it leaves

    def __len__(self) -> int: ...

    def set_epoch(self, epoch: int) -> None: ...


class Adapter(Protocol):
    """Turns engine batches into one framework's objects; built by `from_options(options)`."""

    def __call__(self, batch: Batch) -> Any:
        """One batch as the framework's (images, labels)."""

    def wrap(self, loader: EpochLoader) -> Any:
        """What `iofeed.loader` returns over `loader` (the Loader itself, or a framework dataset)."""
