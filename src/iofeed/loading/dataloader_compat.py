"""DataLoader compatibility: what training scripts written for torch's DataLoader touch on it —
`loader.dataset` (`len`, `classes`, `class_to_idx`, `set_epoch`), `loader.sampler` (`set_epoch`,
`len`), and the DataLoader keyword arguments iofeed has no use for (ignored only where that is
right, otherwise refused in one line naming what to use)."""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

from ..errors import OptionError

if TYPE_CHECKING:
    from ..sources.order import OrderSpec
    from ..sources.samples import SampleSource


class EpochOwner(Protocol):
    """The part of `Loader` the views below use."""

    epoch: int
    source: SampleSource
    order: OrderSpec

    @property
    def spilling(self) -> bool: ...

    def set_epoch(self, epoch: int) -> None: ...


def move_to_epoch(loader: EpochOwner, epoch: int) -> None:
    """`set_epoch` as a DataLoader epoch hook means it: the pass of `epoch` next, keeping a resume
    point (`load_state_dict`) or a pass under way in that epoch, and the rest of a resumed epoch
    that spilled past Lightning's count (`Loader.spilling`). Lightning, timm and pytorch/examples
    call it at the start of every epoch, also right after a resume."""
    if int(epoch) != loader.epoch and not loader.spilling:
        loader.set_epoch(epoch)


class DatasetView:
    """`loader.dataset`: the split as a script sees a torchvision `ImageFolder` — `len()` samples,
    `classes`, `class_to_idx` — and timm's `set_epoch` hook. Samples are not indexable: the
    loader reads and decodes them in its workers."""

    def __init__(self, loader: EpochOwner) -> None:
        self._loader = loader

    def __len__(self) -> int:
        return len(self._loader.source)

    @property
    def classes(self) -> list[str]:
        return list(self._loader.source.classes)

    @property
    def class_to_idx(self) -> dict[str, int]:
        return {name: index for index, name in enumerate(self._loader.source.classes)}

    def set_epoch(self, epoch: int) -> None:
        """The pass of `epoch` next (see `move_to_epoch`)."""
        move_to_epoch(self._loader, epoch)

    def __repr__(self) -> str:
        return f"iofeed dataset view: {len(self)} samples, {len(self.classes)} classes"


class SamplerView:
    """`loader.sampler`: what a `DistributedSampler` offers — `set_epoch`, and `len()` counted as
    DistributedSampler counts it: ceil(samples / world_size) (floor with `drop_last`). So the
    check pytorch/examples' `validate` makes, `len(sampler) * world_size < len(dataset)`, sees no
    missing samples: iofeed drops no tail (it pads the ranks' shares, or with `pad="none"` deals
    each sample once, the last ranks one fewer)."""

    def __init__(self, loader: EpochOwner) -> None:
        self._loader = loader

    def set_epoch(self, epoch: int) -> None:
        """The pass of `epoch` next (see `move_to_epoch`)."""
        move_to_epoch(self._loader, epoch)

    def __len__(self) -> int:
        order = self._loader.order
        return int(order.samples // order.world_size if order.drop_last else -(-order.samples // order.world_size))

    def __repr__(self) -> str:
        order = self._loader.order
        return f"iofeed sampler view: rank {order.rank} of {order.world_size}, {len(self)} samples per epoch"


class DataLoaderAttributes:
    """What scripts written for torch's DataLoader read on it, for `Loader` (which has `order`,
    `source`, `engine`, `epoch` and `set_epoch`)."""

    order: OrderSpec
    engine: Any

    @property
    def dataset(self: EpochOwner) -> DatasetView:
        """The split as an `ImageFolder`-like view: `len()`, `classes`, `class_to_idx`, `set_epoch`."""
        return DatasetView(self)

    @property
    def sampler(self: EpochOwner) -> SamplerView:
        """A `DistributedSampler`-like view: `set_epoch`, `len()`."""
        return SamplerView(self)

    @property
    def batch_sampler(self) -> None:
        """None, as for a DataLoader without one: the order makes the batches (Lightning reads it)."""
        return None

    @property
    def batch_size(self) -> int:
        return self.order.batch_size

    @property
    def drop_last(self) -> bool:
        return self.order.drop_last

    @property
    def num_workers(self) -> int:
        """Worker processes (DALI: threads) decoding now; the autotuner may change it."""
        settings = self.engine.describe()
        return int(settings.get("workers") or settings.get("num_threads") or 0)


ACCEPTED = ("pin_memory", "persistent_workers")  # iofeed already does what they ask: True or False, ignored
REFUSED = {  # they would be ignored silently: anything but None is refused, naming iofeed's own way
    "prefetch_factor": "iofeed's is resources=iofeed.Resources(prefetch=N) (batches made ahead in all, default two "
                       "per worker and at least 8)",
    "collate_fn": "iofeed makes the batches in its workers; do per-batch work with batch_transform=(images, labels) "
                  "and per-image work with transform=",
    "generator": "the order and the augmentation come from seed= (pass seed=N)",
}


def take_dataloader_keywords(keywords: dict[str, Any]) -> None:
    """torch DataLoader's keyword arguments, taken out of `keywords` (what `iofeed.loader` was
    given): `pin_memory` and `persistent_workers` (True or False) are accepted and ignored, because
    iofeed already does what they ask (pinned copies to CUDA; workers kept for the loader's life);
    the others would be ignored silently, so anything but None is refused naming iofeed's own option."""
    for name in ACCEPTED:
        value = keywords.pop(name, None)
        if value is not None and not isinstance(value, bool):
            raise OptionError(f"{name} must be True or False, got {value!r}")
    for name, instead in REFUSED.items():
        if keywords.pop(name, None) is not None:
            raise OptionError(f"{name}= is torch DataLoader's and would do nothing here: {instead}")
