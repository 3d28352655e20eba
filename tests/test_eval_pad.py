"""How an epoch's last round is filled (`Order.pad`), as pure order arithmetic: with "ranks" (the
default) every rank steps the same batches of the same shapes, as DistributedSampler gives, so a
collective per batch completes; with "batches" every batch is full. Either way the padding is
what `valid_rows` masks, and a per-batch all_gather concatenated in rank order (as accelerate's
`gather_for_metrics` does) and cut to the split's length is exactly the split: the padding comes last."""
from __future__ import annotations

import numpy as np
import pytest

from iofeed.errors import OptionError
from iofeed.sources.order import OrderSpec, valid_rows

LAYOUTS = [(257, 16, 2), (257, 16, 3), (258, 16, 4), (10, 4, 4), (7, 3, 3), (1025, 7, 5), (5, 2, 4)]


def _ranks(samples: int, batch_size: int, world: int, pad: str, shuffle: str = "global") -> list[OrderSpec]:
    return [OrderSpec(samples, batch_size, shuffle=shuffle, drop_last=False, seed=3, rank=r, world_size=world,
                      pad=pad) for r in range(world)]


def _gathered(ranks: list[OrderSpec], done: int = 0) -> tuple[list[int], list[int], list[list[int]]]:
    """Each step's batches all-gathered and concatenated in rank order, step after step: the samples,
    those the mask keeps, and every batch's row count per rank."""
    per_rank = [spec.batches(0, done) for spec in ranks]
    owned = [spec.own_samples(batches, done) for spec, batches in zip(ranks, per_rank)]
    rows, kept, shapes = [], [], []
    for step in range(len(per_rank[0])):
        shapes.append([len(batches[step]) for batches in per_rank])
        for batches, own in zip(per_rank, owned):
            rows += batches[step].tolist()
            kept += batches[step][valid_rows(batches[step], own[step])].tolist()
    return rows, kept, shapes


@pytest.mark.parametrize("pad", ["ranks", "batches"])
@pytest.mark.parametrize("samples, batch_size, world", LAYOUTS)
def test_every_rank_steps_alike_and_the_gathered_split_cut_to_its_length_is_exact(samples, batch_size, world, pad):
    ranks = _ranks(samples, batch_size, world, pad)
    rows, kept, shapes = _gathered(ranks)
    assert len({len(spec) for spec in ranks}) == 1, "the same number of batches on every rank"
    assert all(len(set(step)) == 1 for step in shapes), f"the same shapes at every step: {shapes}"
    assert sorted(rows[:samples]) == list(range(samples)), "cut to the split's length: every sample once"
    assert sorted(kept) == list(range(samples)), "masked: every sample once"
    assert len(rows) - samples < (world if pad == "ranks" else batch_size * world)
    if pad == "batches":
        assert all(step == [batch_size] * world for step in shapes), "no short batch"


@pytest.mark.parametrize("pad", ["ranks", "batches"])
def test_a_resumed_epoch_gathers_the_rest_of_the_order(pad):
    """After k batches on every rank (any layout) the rest, gathered and cut, is the rest of the order."""
    before = _ranks(257, 16, 2, pad)
    done = 3 * 16 * 2
    order = np.random.default_rng([3, 0]).permutation(257)
    for world, batch_size in ((2, 16), (3, 5), (4, 16)):
        rows, kept, _ = _gathered(_ranks(257, batch_size, world, pad), done)
        assert sorted(rows[: 257 - done]) == sorted(kept) == sorted(order[done:].tolist())
    uninterrupted = _gathered(before)[0]
    assert _gathered(before, done)[0] == uninterrupted[done:], "the same layout: the rest of the same epoch"


def test_a_streamed_block_order_pads_from_its_end():
    """The padding repeats the epoch's last samples (their shards are still in the cache)."""
    shard_of = np.arange(257) // 20
    ranks = [OrderSpec(257, 16, shuffle="block", drop_last=False, rank=r, world_size=3, shard_of=shard_of)
             for r in range(3)]
    rows, kept, _ = _gathered(ranks)
    assert sorted(rows[:257]) == sorted(kept) == list(range(257))
    assert len(rows) == 258 and rows[-1] == rows[-2], "the one repeat: the order's last sample, right after it"


def test_pad_none_deals_each_sample_once_and_true_false_name_ranks_and_none():
    ranks = _ranks(257, 16, 2, "none")
    assert [len(spec) for spec in ranks] == [9, 8] and [spec.per_rank for spec in ranks] == [129, 128]
    assert sorted(np.concatenate([np.concatenate(s.batches(0)) for s in ranks]).tolist()) == list(range(257))
    assert OrderSpec(9, 2, shuffle="none", drop_last=False, pad=False).pad == "none"
    assert OrderSpec(9, 2, shuffle="none", drop_last=False, pad=True).pad == "ranks"
    with pytest.raises(OptionError, match="pad='even' is not one of ranks, batches, none"):
        OrderSpec(9, 2, shuffle="none", drop_last=False, pad="even")


def test_drop_last_leaves_full_batches_only_whatever_the_pad():
    for pad in ("ranks", "batches", "none"):
        ranks = [OrderSpec(257, 16, shuffle="none", drop_last=True, rank=r, world_size=2, pad=pad) for r in range(2)]
        rows, kept, shapes = _gathered(ranks)
        assert shapes == [[16, 16]] * 8 and rows == kept and sorted(rows) == list(range(256))
