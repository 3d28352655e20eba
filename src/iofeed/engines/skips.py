"""The skip bound, one promise for every engine: the samples an epoch skips become a `SampleError`
once they pass `max_skipped` of its samples, or when the epoch delivers no batch at all."""
from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field

from ..errors import SampleError
from ..sources.folder_scan import reason_kind
from .base import Batch

EXAMPLES = 3  # "path: reason" lines quoted in the error
NOT_SAMPLES = ("hidden file or folder", "not in a class folder", "an iofeed dataset, not a class folder")
FIX = "fix or remove those files, or pass a higher Skips.max_skipped (None: count skips without a bound)"


@dataclass
class EpochSkips:
    """What one epoch on this rank skipped so far, against its bound."""

    epoch: int
    samples: int  # samples the epoch's batches hold on this rank
    max_skipped: float | None
    whole: bool  # counted from the epoch's first batch (not a resumed pass)
    delivered: int = 0
    kinds: Counter[str] = field(default_factory=Counter[str])
    examples: list[str] = field(default_factory=list)

    @property
    def skipped(self) -> int:
        """Samples skipped so far."""
        return sum(self.kinds.values())

    def add(self, batch: Batch, path_of: Callable[[int], str]) -> None:
        """Count one batch; SampleError as soon as the skips already pass the bound (they can only grow)."""
        self.delivered += len(batch.indices)
        for index, reason in batch.skipped:
            self.kinds[reason_kind(reason)] += 1
            if len(self.examples) < EXAMPLES:
                self.examples.append(f"{path_of(index)}: {reason}")
        if self.max_skipped is not None and self.skipped > self.max_skipped * self.samples:
            raise SampleError(f"epoch {self.epoch} skipped {self.skipped} of its {self.samples} samples "
                              f"({self.skipped / max(self.samples, 1):.0%}), more than Skips.max_skipped="
                              f"{self.max_skipped:g}: {self._detail()}")

    def finish(self) -> None:
        """The epoch's last batch was counted: SampleError if it delivered no sample at all."""
        if self.max_skipped is not None and self.whole and self.delivered == 0 and self.samples:
            raise SampleError(f"epoch {self.epoch} delivered no batch: all {self.samples} of its samples were "
                              f"skipped: {self._detail()}")

    def _detail(self) -> str:
        counts = ", ".join(f"{kind} {count}" for kind, count in self.kinds.most_common())
        return f"{counts}; first: {'; '.join(self.examples)} ({FIX})"


def check_scanned(rejected: Counter[str], samples: int, max_skipped: float | None, where: str) -> None:
    """SampleError when the files a folder scan rejected inside class folders (hidden files and
    files outside class folders are not samples) pass `max_skipped` of the files it found there."""
    lost = Counter({kind: n for kind, n in rejected.items() if kind not in NOT_SAMPLES})
    total = sum(lost.values())
    if max_skipped is None or total <= max_skipped * (samples + total):
        return
    counts = ", ".join(f"{kind} {count}" for kind, count in lost.most_common())
    raise SampleError(f"{where}: {total} of {samples + total} files in its class folders were rejected "
                      f"({total / (samples + total):.0%}), more than Skips.max_skipped={max_skipped:g}: {counts} "
                      f"({FIX})")
