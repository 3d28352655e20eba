"""`BatchAccounting` with no engine: batches as the engine contract (`engines.base.Batch`) hands them
over, for a real folder source and passes begun by a real `EpochPosition`; the stats, the epoch's
skip budget and the stats file `iofeed doctor` reads."""
from __future__ import annotations

import numpy as np
import pytest

from helpers.images import make_colour_tree
from iofeed.engines.base import Batch
from iofeed.errors import SampleError
from iofeed.loading.batch_accounting import BatchAccounting
from iofeed.loading.epoch_position import EpochPosition
from iofeed.loading.resume import Progress
from iofeed.loading.stats_file import STATS_DIR_ENV, read_stats
from iofeed.sources.order import OrderSpec
from iofeed.sources.samples import open_source

ORDER = OrderSpec(12, 4, "none", False)  # 3 batches: [0..3], [4..7], [8..11]
TRUNCATED = "truncated JPEG (image file is truncated)"


@pytest.fixture
def source(tmp_path):
    return open_source(make_colour_tree(tmp_path / "tree", per_class=3))  # 12 samples


def _batch(indices: list[int], skipped: list[int] | tuple[int, ...] = ()) -> Batch:
    """A batch of `indices` whose `skipped` samples could not be read."""
    return Batch(np.zeros((len(indices), 2, 2, 3), np.uint8), np.zeros(len(indices), np.int64),
                 np.array(indices, np.int64), [(i, TRUNCATED) for i in skipped])


def test_stats_count_images_batches_waits_and_skips(source):
    books = BatchAccounting(source, lambda: {"workers": 2}, max_skipped=None)
    books.begin_pass(EpochPosition().begin(ORDER))
    books.record(_batch([0, 1, 2, 4], skipped=[3]), 0.25)
    books.record(_batch([], skipped=[5, 6, 7]), 0.5)
    stats = books.stats
    assert (stats.images, stats.batches, stats.skipped_batches, stats.wait_seconds) == (4, 1, 1, 0.75)
    assert books.last_indices.tolist() == [0, 1, 2, 4], "an empty batch leaves the last delivered one"
    assert stats.skipped["truncated JPEG"] == 4
    assert stats.skipped_examples[0] == f"{source.path_of(3)}: {TRUNCATED}"


def test_a_resumed_pass_begun_again_counts_its_skips_once(source):
    """A pass from a resume point (not the epoch's first batch, so its budget carries on) read the
    truncated sample, was left, and begun again: that skip is counted once against the bound."""
    books = BatchAccounting(source, dict, max_skipped=0.15)  # 1 skip of the 8 left passes, 2 do not
    at = EpochPosition()
    at.resume(Progress(0, 4, 1))
    books.begin_pass(at.begin(ORDER))
    books.record(_batch([4, 5, 6], skipped=[7]), 0.0)
    assert books.skips is not None and books.skips.skipped == 1 and books.skips.samples == 8
    assert at.rewind(ORDER) and at.position == 1
    books.restore_skips()
    books.begin_pass(at.begin(ORDER))
    books.record(_batch([4, 5, 6], skipped=[7]), 0.0)  # the same skip read again: still within the bound
    assert books.skips.skipped == 1 and books.stats.skipped["truncated JPEG"] == 2, "stats count every read"
    with pytest.raises(SampleError, match=r"epoch 0 skipped 2 of its 8 samples .*max_skipped=0.15"):
        books.record(_batch([8, 9, 10], skipped=[11]), 0.0)


def test_a_pass_that_continues_its_epoch_keeps_the_count_and_the_next_epoch_starts_anew(source):
    books = BatchAccounting(source, dict, max_skipped=None)
    at = EpochPosition()
    run = at.begin(ORDER)
    books.begin_pass(run)
    books.record(_batch([0, 1, 2], skipped=[3]), 0.0)
    at.advance(run)
    at.continue_next()  # `repeat()`: the next pass continues this one
    books.begin_pass(at.begin(ORDER))
    assert books.skips is not None and books.skips.skipped == 1 and books.skips.whole, "its count kept"
    at.set_epoch(1)
    books.begin_pass(at.begin(ORDER))
    assert books.skips.epoch == 1 and books.skips.skipped == 0 and books.skips.samples == 12


def test_an_epoch_that_delivers_nothing_raises_at_its_end(source):
    books = BatchAccounting(source, dict, max_skipped=1.0)
    books.begin_pass(EpochPosition().begin(ORDER))
    for batch in ORDER.batches(0):
        books.record(_batch([], skipped=batch.tolist()), 0.0)
    with pytest.raises(SampleError, match="epoch 0 delivered no batch: all 12 of its samples were skipped"):
        books.finish_epoch()


def test_the_stats_file_holds_the_last_counts_and_the_workers(source, tmp_path, monkeypatch):
    monkeypatch.setenv(STATS_DIR_ENV, str(tmp_path / "stats"))
    (tmp_path / "stats").mkdir()
    books = BatchAccounting(source, lambda: {"workers": 3}, max_skipped=None)
    books.begin_pass(EpochPosition().begin(ORDER))
    books.record(_batch([0, 1, 2, 3]), 0.0)  # the first write is due at once
    (first,) = read_stats(tmp_path / "stats")
    assert first["images"] == 4 and first["workers"] == 3
    books.record(_batch([4, 5, 6, 7]), 0.0)
    books.close()
    (last,) = read_stats(tmp_path / "stats")
    assert last["images"] == 8 and last["batches"] == 2 and last["elapsed_seconds"] >= 0
