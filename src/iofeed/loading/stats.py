"""`LoaderStats`: what a loader delivered and skipped, how long its consumer waited, its settings."""
from __future__ import annotations

import dataclasses
import os
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ..augment.transforms import transform_name


@dataclass
class LoaderStats:
    """What the loader delivered and skipped, how long the consumer waited, and its settings."""

    images: int = 0
    batches: int = 0
    skipped_batches: int = 0  # batches not delivered: every sample of them was skipped
    skipped: Counter[str] = field(default_factory=Counter)  # reason kind -> count (includes the source scan)
    skipped_examples: list[str] = field(default_factory=list)  # first few "path: reason"
    wait_seconds: float = 0.0  # time the consumer spent waiting for the next batch
    fixed: dict[str, Any] = field(default_factory=dict)  # the loader's settings that do not change
    fetched: dict[str, float] = field(default_factory=dict)  # streamed datasets: shards, bytes, seconds downloaded
    live: Callable[[], dict[str, Any]] | None = field(default=None, repr=False)  # the engine's settings now
    transform_seconds: float = 0.0  # CPU time of the per-sample `transform=`, over `images` delivered
    transform_wall_seconds: float = 0.0  # wall time of the same calls (waits included)
    worker_cpu_seconds: float = 0.0  # CPU time of the workers engine's processes for the batches delivered
    copied_batches: int = 0  # batches copied out of engine memory: the consumer held all the engine could lend
    refilled: int = 0  # skipped samples whose places spare samples of the epoch took (full batches)
    sources: dict[str, dict[str, Any]] = field(default_factory=dict)  # a Mix: name -> delivered, skipped by reason
    boxes: Counter[str] = field(default_factory=Counter)  # target="boxes"/"masks": delivered, dropped_not_visible

    @property
    def settings(self) -> dict[str, Any]:
        """The loader's settings as they are now: `fixed` and the engine's (`Engine.describe()`), so the
        worker count, prefetch depth and the autotuner's `decisions` (after_seconds, workers, reason)
        follow the autotuner; what `engine="auto"` chose comes first in `decisions`. A new dict at
        each read."""
        live = self.live() if self.live is not None else {}
        decisions = [*self.fixed.get("decisions", []), *live.get("decisions", [])]
        return {**self.fixed, **live, **({"decisions": decisions} if decisions else {})}

    @property
    def transform_ms_per_image(self) -> float | None:
        """Wall milliseconds the per-sample transform took per delivered image, its waits (I/O, locks,
        sleeps) included: what it holds a worker up (None without one)."""
        return self._per_image(self.transform_wall_seconds)

    @property
    def transform_cpu_ms_per_image(self) -> float | None:
        """CPU milliseconds of the same calls per delivered image (a busy machine does not inflate it)."""
        return self._per_image(self.transform_seconds)

    def _per_image(self, seconds: float) -> float | None:
        if not self.settings.get("transform") or not self.images:
            return None
        return 1000.0 * seconds / self.images

    def as_dict(self) -> dict[str, Any]:
        """Plain-JSON form."""
        return {
            "images": self.images,
            "batches": self.batches,
            "skipped_batches": self.skipped_batches,
            "skipped": dict(self.skipped),
            "skipped_examples": list(self.skipped_examples),
            "wait_seconds": self.wait_seconds,
            "settings": self.settings,
            "fetched": dict(self.fetched),
            "transform_seconds": self.transform_seconds,
            "worker_cpu_seconds": self.worker_cpu_seconds,
            "transform_wall_seconds": self.transform_wall_seconds,
            "copied_batches": self.copied_batches,
            "boxes": dict(self.boxes),
            "refilled": self.refilled,
            "transform_ms_per_image": self.transform_ms_per_image,
            "transform_cpu_ms_per_image": self.transform_cpu_ms_per_image,
            "sources": {name: {**s, "skipped": dict(s["skipped"])} for name, s in self.sources.items()},
        }


def described(options: Any) -> dict[str, Any]:
    """A dataclass option value (an `iofeed.Recipe`) as plain JSON values, field by field, for
    `stats.settings["options"]` (`LoaderOptions.keywords()` names the options): numbers, strings,
    booleans and None as they are, a tuple as a list, a dataclass by its own fields, a callable (a
    transform) by its name, anything else (a device, a dtype, a sharding) as its text."""
    return {f.name: json_value(getattr(options, f.name)) for f in dataclasses.fields(options) if f.init}


def json_value(value: Any) -> Any:
    """`value` as `described` records it."""
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, os.PathLike):
        return os.fspath(value)
    if isinstance(value, (list, tuple)):
        return [json_value(item) for item in value]
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return described(value)
    return transform_name(value) if callable(value) else str(value)
