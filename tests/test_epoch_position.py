"""`EpochPosition` with no engine: real `OrderSpec`s, passes driven as `Loader.__iter__` drives them,
and every count checked against the samples the passes deal (numbers the Loader gives today: see
tests/test_elastic.py and tests/test_passes.py for the same runs through real loaders)."""
from __future__ import annotations

from collections import Counter

import numpy as np
import pytest

from iofeed.loading.epoch_position import EpochPosition
from iofeed.loading.resume import Progress
from iofeed.sources.order import OrderSpec

SAMPLES = 103


def _spec(world: int, batch: int, rank: int = 0, samples: int = SAMPLES, shuffle: str = "global") -> OrderSpec:
    return OrderSpec(samples, batch, shuffle, False, seed=4, rank=rank, world_size=world, block_shards=3,
                     shard_of=np.arange(samples) // 7)


def _pass(at: EpochPosition, order: OrderSpec, count: int | None = None) -> list[int]:
    """A new pass as `iter(loader)` begins it, delivering up to `count` batches (None: to its end);
    the sample indices it delivered."""
    at.rewind(order)
    run = at.begin(order)
    seen: list[int] = []
    for taken, batch in enumerate(run.batches[run.start:]):
        if taken == count:
            return seen
        seen += batch.tolist()
        if at.advance(run):
            at.complete(run)
    at.end(run)
    return seen


def _resumed(progress: Progress) -> EpochPosition:
    at = EpochPosition()
    at.resume(progress)
    return at


def test_a_whole_pass_holds_len_batches_and_moves_to_the_next_epoch():
    order = _spec(4, 4)
    at = EpochPosition()
    assert at.length(order) == 7, "103 samples on 4 ranks: 26 each, 7 batches of at most 4"
    run = at.begin(order)
    ends = [at.advance(run) for _ in range(7)]
    assert ends == [False] * 6 + [True], "only the 7th batch completes the epoch"
    assert (at.epoch, at.position, at.pass_start) == (0, 7, (0, 0, 0, 0))
    at.complete(run)
    assert (at.epoch, at.position, at.done, at.first, at.pass_start) == (1, 0, 0, 0, None)
    assert at.progress(order) == Progress(1, 0, 0)


def test_progress_counts_the_samples_every_rank_dealt():
    """After 3 batches on each of 4 ranks of 4, the state says 48 samples: exactly those the 4 ranks
    delivered, the first 48 of the epoch's global order."""
    ranks = [EpochPosition() for _ in range(4)]
    seen = [_pass(at, _spec(4, 4, rank), count=3) for rank, at in enumerate(ranks)]
    dealt = sorted(sum(seen, []))
    assert len(set(dealt)) == len(dealt) == 48
    assert dealt == sorted(_spec(1, 1).rank_indices(0)[:48].tolist())
    assert all(at.progress(_spec(4, 4, r)) == Progress(0, 48, 3) for r, at in enumerate(ranks)), "one state"


@pytest.mark.parametrize("shuffle", ["global", "block"])
@pytest.mark.parametrize("world, batch", [(2, 4), (3, 5), (8, 4), (4, 3), (1, 1)])
def test_resumed_on_another_world_and_batch_size_deals_the_rest_once(world, batch, shuffle):
    before = [_pass(EpochPosition(), _spec(4, 4, rank, shuffle=shuffle), count=3) for rank in range(4)]
    orders = [_spec(world, batch, rank, shuffle=shuffle) for rank in range(world)]
    ranks = [_resumed(Progress(0, 48, 3)) for _ in orders]
    lengths = [at.length(order) for at, order in zip(ranks, orders)]
    assert not any(at.under_way for at in ranks), "no batch since the resume: the group may still be joined"
    after = [_pass(at, order) for at, order in zip(ranks, orders)]
    seen = Counter(sum(before + after, []))
    assert set(seen) == set(range(SAMPLES)), "every sample of the epoch"
    assert sum(seen.values()) - SAMPLES == -(SAMPLES - 48) % world, "only the padding repeats"
    delivered = -(-len(after[0]) // batch)  # batches of the rest on each rank
    assert len({len(a) for a in after}) == 1 and delivered > 0
    assert lengths == [max(len(orders[0]), 3 + delivered)] * world, "len(): the 3 before the resume and the rest"
    assert all((at.epoch, at.position, at.done) == (1, 0, 0) for at in ranks), "the epoch completed"


def test_len_of_a_resumed_epoch_counts_the_batches_before_it():
    """The loader test's run (test_elastic): 3 batches of 2 on 1 rank of 32 samples, resumed on 4
    ranks holds 3 + 4 batches (26 samples left: 7 per rank), more than a whole epoch's 4; on 1 rank
    it holds fewer than a whole epoch's 16, and len() stays 16."""
    saved = EpochPosition()
    _pass(saved, _spec(1, 2, samples=32), count=3)
    progress = saved.progress(_spec(1, 2, samples=32))
    assert progress == Progress(0, 6, 3)
    four = _spec(4, 2, samples=32)
    at = _resumed(progress)
    assert (at.length(four), len(four)) == (7, 4)
    assert len(_pass(at, four)) == 7 and at.epoch == 1 and at.length(four) == 4, "whole epochs again"
    one = _spec(1, 2, samples=32)
    at = _resumed(progress)
    assert at.length(one) == 16 and len(_pass(at, one)) == 26


def test_a_pass_left_early_begins_again_from_where_it_began():
    order = _spec(4, 4)
    at = EpochPosition()
    first = _pass(at, order, count=3)
    assert at.progress(order) == Progress(0, 48, 3)
    whole = _pass(at, order)
    assert whole[:12] == first and len(whole) == 26, "the epoch from its start, not from batch 3"
    assert at.epoch == 1 and _pass(at, order) != whole, "after a whole pass: the next epoch"


def test_a_resumed_pass_left_early_begins_again_at_the_resume():
    order = _spec(4, 4)
    whole = _pass(EpochPosition(), order)
    at = _resumed(Progress(0, 48, 3))
    assert _pass(at, order, count=1) == whole[12:16]
    assert _pass(at, order) == whole[12:], "the resumed rest of the epoch, not the epoch from its start"


def test_continue_next_takes_up_a_pass_left_early_where_it_stopped():
    """`Loader.repeat()`: a stream of passes, each continuing where the last stopped."""
    order = _spec(4, 4)
    whole = _pass(EpochPosition(), order)
    at = EpochPosition()
    head = _pass(at, order, count=2)
    at.continue_next()
    assert head + _pass(at, order) == whole


def test_a_larger_global_batch_after_the_resume_spills_past_len_and_continues():
    """2 batches of 4 on 1 rank, resumed on 4 ranks of 4: the epoch holds 2 + 6 batches, one more
    than a whole epoch's 7. A consumer that stops at 7 (Lightning's count from before the resume)
    leaves it spilling, and the next pass delivers the last batch rather than beginning again."""
    progress = Progress(0, 8, 2)
    orders = [_spec(4, 4, rank) for rank in range(4)]
    ranks = [_resumed(progress) for _ in orders]
    assert [at.length(order) for at, order in zip(ranks, orders)] == [8] * 4 and len(orders[0]) == 7
    assert not ranks[0].spilling(orders[0]), "no pass begun yet"
    seen = []
    for at, order in zip(ranks, orders):
        head = _pass(at, order, count=4)
        assert at.position == 6 and not at.spilling(order)
        at.rewind(order)
        assert at.position == 2, "short of len(): a pass left early is begun again"
        head = _pass(at, order, count=5)
        assert at.position == 7 and at.spilling(order)
        tail = _pass(at, order)
        assert len(tail) == 4 and at.epoch == 1 and not at.spilling(order), "the last batch, then the next epoch"
        seen += head + tail
    dealt = Counter(seen + _spec(1, 1).rank_indices(0)[:8].tolist())
    assert set(dealt) == set(range(SAMPLES)) and sum(dealt.values()) - SAMPLES == -(SAMPLES - 8) % 4


def test_set_epoch_starts_that_epoch_from_its_beginning():
    order = _spec(4, 4)
    at = _resumed(Progress(2, 48, 3))
    _pass(at, order, count=1)
    at.set_epoch(5)
    assert at.length(order) == 7 and at.progress(order) == Progress(5, 0, 0) and at.pass_start is None
    assert _pass(at, order) == order.rank_indices(5).tolist()[:26]


def test_a_pass_that_finds_its_epoch_delivered_moves_to_the_next():
    order = _spec(4, 4)
    at = _resumed(Progress(3, SAMPLES, 7))
    assert at.length(order) == 7
    assert _pass(at, order) == [] and (at.epoch, at.position) == (4, 0)


def test_set_epoch_during_a_pass_holds_for_the_state_and_the_next_pass():
    """`set_epoch(3)` while a pass of epoch 0 still delivers (a `repeat()` stream): its later batches
    overwrote the position (a state then said epoch 3 with 12 samples done, so a resume skipped 12
    samples epoch 3 never dealt), and its end moved on to epoch 1, dropping the `set_epoch`."""
    order = _spec(4, 4)
    at = EpochPosition()
    run = at.begin(order)
    at.advance(run), at.advance(run)
    at.set_epoch(3)
    assert not at.advance(run) and at.progress(order) == Progress(3, 0, 0), "epoch 3, nothing of it done"
    ends = [at.advance(run) for _ in range(4)]
    assert ends == [False] * 3 + [True], "the old pass still ends at its own last batch"
    at.complete(run)
    assert (at.epoch, at.position, at.progress(order)) == (3, 0, Progress(3, 0, 0))
    assert _pass(at, order) == order.rank_indices(3).tolist()[:26] and at.epoch == 4


def test_a_resume_during_a_pass_is_not_overwritten_by_its_later_batches():
    order = _spec(4, 4)
    at = EpochPosition()
    run = at.begin(order)
    at.advance(run)
    at.resume(Progress(2, 48, 3))
    at.advance(run)
    assert at.progress(order) == Progress(2, 48, 3)
    whole = _pass(EpochPosition(epoch=2), order)
    assert _pass(at, order) == whole[12:], "the resumed rest of epoch 2"
