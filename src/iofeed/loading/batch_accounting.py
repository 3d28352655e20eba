"""`BatchAccounting`: what a loader counts for each batch it delivers — `LoaderStats`, the epoch's skip
budget (and a Mix's per source), the stats file `iofeed doctor` reads, the bytes streamed datasets
fetched — apart from where the loader stands in its epochs (`loading/epoch_position.py`)."""
from __future__ import annotations

import copy
from collections import Counter
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np
from numpy.typing import NDArray

from ..engines.skips import EpochSkips
from ..sources.folder_scan import reason_kind
from .stats import LoaderStats
from .stats_file import StatsWriter

if TYPE_CHECKING:
    from ..engines.base import Batch
    from ..sources.samples import SampleSource
    from .epoch_position import Pass
    from .mix_source import Mixture

EXAMPLES = 20  # "path: reason" lines kept in `LoaderStats.skipped_examples`


class BatchAccounting:
    """The books of one loader: `stats`, `last_indices`, the skips of the epoch in progress
    against `max_skipped`, and the stats file when `iofeed doctor` traces this process."""

    def __init__(self, source: SampleSource, describe: Callable[[], dict[str, Any]], max_skipped: float | None,
                 mixture: Mixture | None = None) -> None:
        self.source, self._describe, self.max_skipped, self.mixture = source, describe, max_skipped, mixture
        self.stats = LoaderStats(skipped=Counter(source.rejected), live=describe)
        self.last_indices: NDArray[np.int64] = np.empty(0, np.int64)  # sample indices of the latest batch, for auditing
        self.skips: EpochSkips | None = None  # the skips of the epoch in progress
        # the skips (and a Mix's per source) as they were when the pass under way began
        self._skips_at_start: tuple[EpochSkips | None, list[EpochSkips] | None] = (None, None)
        self._stats_file = StatsWriter.from_env()

    def begin_pass(self, run: Pass) -> None:
        """A pass begins: a new skip budget for a new epoch or one begun from its first batch (a pass
        that continues an epoch keeps its count), remembered as it is now for `restore_skips`."""
        skips, whole = self.skips, run.start == 0
        if skips is None or skips.epoch != run.epoch or whole:
            self.skips = EpochSkips(run.epoch, run.batches.samples, self.max_skipped, whole=whole)
            if self.mixture is not None:
                self.mixture.start_epoch(run.epoch, run.batches, self.max_skipped, whole=whole)
        self._skips_at_start = copy.deepcopy((self.skips, self.mixture.skips if self.mixture is not None else None))
        if self._stats_file is not None:
            self._stats_file.started()

    def restore_skips(self) -> None:
        """The skip counts (and a Mix's per source) as they were when the pass began: a pass left
        early is read again, and its skips must not count twice."""
        skips, by_source = copy.deepcopy(self._skips_at_start)
        self.skips = skips
        if self.mixture is not None and by_source is not None:
            self.mixture.skips = by_source

    def record(self, batch: Batch, waited: float) -> None:
        """Count a batch the consumer waited `waited` seconds for: stats, then the skip bounds
        (SampleError once they are passed), then the stats file when it is due."""
        self.stats.wait_seconds += waited
        self._record(batch)
        self._epoch_skips.add(batch, self.source.path_of)
        if self.mixture is not None:
            self.mixture.check_skips(batch, self.source.path_of)
        if self._stats_file is not None:
            self._stats_file.maybe_write(self.snapshot)

    def _record(self, batch: Batch) -> None:
        stats = self.stats
        if len(batch.indices):
            self.last_indices = batch.indices
            stats.images += len(batch.indices)
            stats.batches += 1
            stats.transform_seconds += batch.transform_seconds
            stats.transform_wall_seconds += batch.transform_wall_seconds
            stats.worker_cpu_seconds += batch.cpu_seconds
            stats.copied_batches += batch.copied
            stats.refilled += batch.refilled
        else:
            stats.skipped_batches += 1
        for index, reason in batch.skipped:
            stats.skipped[reason_kind(reason)] += 1
            if len(stats.skipped_examples) < EXAMPLES:
                stats.skipped_examples.append(f"{self.source.path_of(index)}: {reason}")
        if self.mixture is not None:
            self.mixture.record(batch, stats.sources)

    def finish_epoch(self) -> None:
        """The epoch's last batch was counted: SampleError if it delivered no sample at all."""
        self._epoch_skips.finish()

    @property
    def _epoch_skips(self) -> EpochSkips:
        assert self.skips is not None, "a pass begins (begin_pass) before its batches are counted"
        return self.skips

    def count_fetched(self) -> None:
        """Update `stats.fetched` (and a Mix's per source) from the node's fetch log (streamed datasets)."""
        if self.source.remote is not None:
            self.stats.fetched = self.source.remote.fetched()
        if self.mixture is not None:
            self.mixture.count_fetched(self.stats.sources)

    def snapshot(self) -> dict[str, Any]:
        """The stats as plain JSON, with the workers taking tasks now."""
        return {**self.stats.as_dict(), "workers": self._describe().get("workers")}

    def close(self) -> None:
        """The last count of fetched bytes, and the stats file written a last time."""
        self.count_fetched()
        if self._stats_file is not None:
            self._stats_file.write(self.snapshot())
