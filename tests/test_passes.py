"""What a new `iter()` means (a new pass, as with torch's DataLoader) and how an evaluation split is
shared among ranks (equal shares, the padding masked; or each sample exactly once); checked from
the pixels, which encode the label."""
from __future__ import annotations

import os

import numpy as np
import pytest

import iofeed
from helpers.images import label_from_pixels, make_colour_tree
from helpers.runs import state_after
from iofeed.sources.order import OrderSpec


def _pass(ld, batches: int | None = None) -> list[int]:
    """The sample indices of up to `batches` batches of a new pass, each label checked from its pixels."""
    seen = []
    for k, (images, labels) in enumerate(ld, start=1):
        assert [label_from_pixels(image) for image in np.asarray(images)] == np.asarray(labels).tolist()
        seen += ld.last_indices.tolist()
        if k == batches:
            break
    return seen


def test_an_evaluation_pass_left_early_is_read_whole_by_the_next_iteration(colour_dataset):
    """Lightning's sanity check takes 2 validation batches and breaks: the first real validation
    then covered the split from its third batch on."""
    with iofeed.loader(colour_dataset, split="val", batch_size=2, workers=1) as ld:
        assert len(_pass(ld, batches=2)) == 4
        whole = _pass(ld)
        assert whole == list(range(8)), "every sample of the split, in order, once"
        assert _pass(ld) == whole


def test_a_training_pass_left_early_begins_again_and_a_whole_one_moves_on(colour_dataset):
    options = {"batch_size": 4, "workers": 1, "seed": 3}
    with iofeed.loader(colour_dataset, **options) as fresh:
        epochs = [_pass(fresh), _pass(fresh)]
    with iofeed.loader(colour_dataset, **options) as ld:
        assert _pass(ld, batches=3) == epochs[0][:12]
        assert _pass(ld) == epochs[0], "a new iter() after an abandoned pass: that epoch from its start"
        assert _pass(ld) == epochs[1], "after a whole pass: the next epoch"
        assert sorted(epochs[1]) == list(range(32)) and epochs[0] != epochs[1]


def test_a_resumed_pass_left_early_resumes_again(colour_dataset):
    """Only `load_state_dict` (or `set_epoch`) positions a pass mid-epoch: a consumer that peeks
    at a batch (Keras, a distribution strategy) before the real pass does not lose the resume."""
    options = {"batch_size": 4, "workers": 1, "seed": 3}
    with iofeed.loader(colour_dataset, **options) as ld:
        whole = _pass(ld)
        ld.set_epoch(0)
        _pass(ld, batches=3)
        state = ld.state_dict()
    with iofeed.loader(colour_dataset, **options) as ld:
        ld.load_state_dict(state)
        assert _pass(ld, batches=1) == whole[12:16]
        assert _pass(ld) == whole[12:], "the resumed rest of the epoch, not the epoch from its start"
        assert ld.epoch == 1


def test_set_epoch_during_a_repeat_stream_is_where_the_state_and_the_next_pass_are(colour_dataset):
    """`set_epoch(3)` two batches into a `repeat()` stream: the stream's pass of epoch 0 delivers its
    rest, a state saved meanwhile resumes epoch 3 from its start (it said 12 samples of epoch 3
    done: a resume lost them), and the stream goes on with epoch 3 (it went on with epoch 1)."""
    options = {"batch_size": 4, "workers": 1, "seed": 3}
    with iofeed.loader(colour_dataset, **options) as fresh:
        epoch0 = _pass(fresh)
        fresh.set_epoch(3)
        epoch3 = _pass(fresh)
    with iofeed.loader(colour_dataset, **options) as ld:
        stream, seen = ld.repeat(), []
        for _ in range(2):
            next(stream)
            seen += ld.last_indices.tolist()
        ld.set_epoch(3)
        next(stream)
        seen += ld.last_indices.tolist()
        state = ld.state_dict()
        assert (state["epoch"], state["samples_done"]) == (3, 0)
        for _ in range(5 + 8):  # the rest of epoch 0's pass, then a whole pass
            images, labels = next(stream)
            assert [label_from_pixels(image) for image in np.asarray(images)] == np.asarray(labels).tolist()
            seen += ld.last_indices.tolist()
        assert seen == epoch0 + epoch3, "epoch 0 whole, then epoch 3"
    with iofeed.loader(colour_dataset, **options) as ld:
        ld.load_state_dict(state)
        assert _pass(ld) == epoch3


@pytest.mark.parametrize("world", [2, 3, 5])
@pytest.mark.parametrize("batch_size", [1, 3, 4])
def test_evaluation_orders_deal_each_sample_once(world, batch_size):
    """257 samples on 2 ranks scored 258 (sample 0 twice): no padding on evaluation splits."""
    samples = 257
    ranks = [OrderSpec(samples, batch_size, shuffle="none", drop_last=False, rank=r, world_size=world, pad=False)
             for r in range(world)]
    dealt = [np.concatenate(spec.batches(0)) for spec in ranks]
    assert sorted(np.concatenate(dealt).tolist()) == list(range(samples))
    assert [len(spec) for spec in ranks] == [-(-len(d) // batch_size) for d in dealt]
    assert max(len(d) for d in dealt) - min(len(d) for d in dealt) <= 1
    done = 2 * batch_size * world  # after k batches on every rank: a prefix of the global order, as for training
    rest = [np.concatenate(spec.batches(0, done)) for spec in ranks]
    assert sorted(np.concatenate(rest).tolist()) == list(range(done, samples))


def test_the_val_split_is_padded_evenly_across_ranks_and_with_pad_none_dealt_once(colour_dataset):
    """By default every rank steps the same batches of the same shapes (8 samples over 3 ranks:
    3 + 3 + 3, one repeat that `last_valid` masks); `Order(pad="none")` deals each sample once."""
    options = {"split": "val", "batch_size": 2, "workers": 1}
    even = [iofeed.loader(colour_dataset, placement=iofeed.Placement(rank=r, world_size=3), **options)
            for r in range(3)]
    once = [iofeed.loader(colour_dataset, placement=iofeed.Placement(rank=r, world_size=3),
                          order=iofeed.Order(pad="none"), **options) for r in range(3)]
    try:
        shapes, kept = [], []
        for ld in even:
            shapes.append([len(indices) for indices in (_pass(ld, batches=1), _pass(ld)[2:])])
            for _ in ld:
                kept += ld.last_indices[ld.last_valid].tolist()
        assert shapes == [[2, 1]] * 3 and [len(ld) for ld in even] == [2, 2, 2]
        assert sorted(kept) == list(range(8)), "masked, each sample once"
        shares = [_pass(ld) for ld in once]
        assert sorted(sum(shares, [])) == list(range(8)) and [len(ld) for ld in once] == [2, 2, 1]
    finally:
        for ld in even + once:
            ld.close()


def test_a_resumed_pass_left_early_counts_its_skips_once(tmp_path):
    """A resumed pass (Keras peeking, a `break`) that read the truncated JPEG and was begun again
    counted that skip twice, and a bound it met once raised SampleError on the next pass."""
    root = make_colour_tree(tmp_path / "t", per_class=4, corrupt=1)  # 17 files
    options = {"batch_size": 2, "workers": 1, "image_size": 32, "seed": 0}
    with iofeed.loader(root, skips=iofeed.Skips(max_skipped=None), **options) as ld:
        bad = next(i for i in range(len(ld.source)) if os.path.basename(ld.source.path_of(i)) == "bad0.jpg")
        at = next(k for k, batch in enumerate(ld.order.batches(0)) if bad in batch)
        assert at >= 2, "the seed must put the truncated JPEG past the resume point"
        ld.set_epoch(0)
        state = state_after(ld, 1)
    with iofeed.loader(root, skips=iofeed.Skips(max_skipped=0.1),
                       **options) as ld:  # one skip of the 14 left passes, two do not
        ld.load_state_dict(state)
        rest = len(ld) - 1
        assert 1 <= 0.1 * rest * 2 < 2
        _pass(ld, batches=at)  # through the truncated JPEG's batch, then left
        assert len(_pass(ld)) == rest * 2, "the resumed rest of the epoch again, its skip counted once"
        assert sum(ld.stats.skipped.values()) == 2, "stats count every read, the bound the epoch's"
