"""Pure functions: train/val split, epoch order, crop boxes."""
from __future__ import annotations

import numpy as np
import pytest

from iofeed.errors import OptionError
from iofeed.image.boxes import Augment, center_box, random_resized_box
from iofeed.prepare.splits import validation_mask
from iofeed.sources.order import OrderSpec


def test_validation_mask_per_class_and_deterministic():
    labels = np.repeat(np.arange(5), [1, 2, 10, 30, 100])
    mask = validation_mask(labels, seed=3)
    counts = [int(mask[labels == c].sum()) for c in range(5)]
    assert counts == [0, 1, 1, 3, 10]
    assert np.array_equal(mask, validation_mask(labels, seed=3))
    assert not np.array_equal(mask, validation_mask(labels, seed=4))
    fixed = validation_mask(labels, seed=0, val_per_class=5)
    assert [int(fixed[labels == c].sum()) for c in range(5)] == [0, 1, 5, 5, 5]


@pytest.mark.parametrize("kwargs", [{"val_fraction": 1.5}, {"val_fraction": float("nan")}, {"val_per_class": -1},
                                    {"val_per_class": 1, "val_fraction": 0.1}])
def test_validation_mask_rejects_bad_options(kwargs):
    with pytest.raises(OptionError):
        validation_mask(np.zeros(4), seed=0, **kwargs)


@pytest.mark.parametrize("samples, world, batch, drop_last", [(103, 4, 8, False), (103, 4, 8, True), (10, 3, 4, False)])
def test_order_ranks_equal_disjoint_covering(samples, world, batch, drop_last):
    specs = [OrderSpec(samples, batch, True, drop_last, seed=1, rank=r, world_size=world) for r in range(world)]
    per_rank = [np.concatenate(s.batches(epoch=2)) for s in specs]
    assert len({len(s) for s in specs}) == 1
    assert len({len(p) for p in per_rank}) == 1
    together = np.concatenate(per_rank)
    if drop_last:
        assert len(set(together.tolist())) == len(together)
    else:
        assert set(together.tolist()) == set(range(samples))
        assert len(together) - samples < world * batch


def test_order_is_a_function_of_seed_and_epoch():
    spec = OrderSpec(50, 4, True, False, seed=9)
    assert np.array_equal(spec.rank_indices(1), OrderSpec(50, 4, True, False, seed=9).rank_indices(1))
    assert not np.array_equal(spec.rank_indices(1), spec.rank_indices(2))
    assert np.array_equal(OrderSpec(50, 4, False, False).rank_indices(5), np.arange(50))


def test_order_rejects_bad_values():
    with pytest.raises(OptionError):
        OrderSpec(10, 0, True, False)
    with pytest.raises(OptionError):
        OrderSpec(10, 2, True, False, rank=2, world_size=2)


def test_random_resized_box_within_image_scale_and_ratio():
    """Every drawn box lies in the image with the area and aspect asked for, up to the half pixel its
    rounded sides may lose; the rest are exactly the fallback (tested by itself below)."""
    rng = np.random.default_rng(0)
    drawn = 0
    for _ in range(500):
        w, h = int(rng.integers(20, 900)), int(rng.integers(20, 900))
        box = random_resized_box(w, h, rng, (0.08, 1.0), (3 / 4, 4 / 3))
        left, top, right, bottom = box
        assert 0 <= left < right <= w and 0 <= top < bottom <= h
        assert all(isinstance(v, int) for v in box)
        if box == _fallback(w, h, (3 / 4, 4 / 3)):
            continue
        drawn += 1
        bw, bh = right - left, bottom - top
        assert (bw + 0.5) * (bh + 0.5) >= 0.08 * w * h and (bw - 0.5) * (bh - 0.5) <= w * h
        assert (bw + 0.5) / (bh - 0.5) >= 3 / 4 and (bw - 0.5) / (bh + 0.5) <= 4 / 3
    assert drawn > 400  # most boxes are drawn: the fallback is for images far from the ratio range


def _shares_and_log_aspects(scale, ratio) -> tuple[np.ndarray, np.ndarray]:
    """Area share and log aspect of 2,000 boxes drawn on a square 400 x 400 image."""
    rng = np.random.default_rng(1)
    boxes = [random_resized_box(400, 400, rng, scale, ratio) for _ in range(2000)]
    return (np.array([(r - left) * (b - top) / 400**2 for left, top, r, b in boxes]),
            np.log([(r - left) / (b - top) for left, top, r, b in boxes]))


QUANTILES = [0.0, 0.25, 0.5, 0.75, 1.0]


@pytest.mark.parametrize("scale, ratio", [((0.1, 0.5), (3 / 4, 4 / 3)), ((0.05, 0.3), (0.5, 2.0))])
def test_random_resized_boxes_are_uniform_over_scale_and_log_ratio(scale, ratio):
    """Boxes within bounds are not enough: drawn with one bound as both ends (`scale[0]`, `scale[0]`)
    every box lay within them too. Where every draw fits the image (share x aspect <= 1), the
    shares are uniform in `scale` and the log aspects in `ratio`: their quartiles where a uniform
    draw puts them, within 4% of the range."""
    shares, aspects = _shares_and_log_aspects(scale, ratio)
    for values, (lo, hi) in ((shares, scale), (aspects, tuple(np.log(ratio)))):
        wanted = lo + (hi - lo) * np.array(QUANTILES)
        found = np.quantile(values, QUANTILES)
        assert np.allclose(found, wanted, atol=0.04 * (hi - lo) + 0.003), (found, wanted)


def test_the_default_crop_reaches_both_ends_of_its_scale_and_ratio():
    """torchvision's scheme draws again when a large share at a far aspect does not fit, so the
    default's shares lean small; still they cover (0.08, 1.0) and the aspects (3/4, 4/3)."""
    shares, aspects = _shares_and_log_aspects((0.08, 1.0), (3 / 4, 4 / 3))
    assert shares.min() < 0.09 and shares.max() > 0.97 and np.quantile(shares, 0.75) - np.quantile(shares, 0.25) > 0.3
    assert aspects.min() < np.log(0.76) and aspects.max() > np.log(1.31) and abs(np.median(aspects)) < 0.03


def _fallback(width: int, height: int, ratio: tuple[float, float]) -> tuple[int, int, int, int]:
    """torchvision's `RandomResizedCrop` fallback: the whole image, its long side cut to the nearest ratio."""
    if width / height < ratio[0]:
        w, h = width, round(width / ratio[0])
    elif width / height > ratio[1]:
        w, h = round(height * ratio[1]), height
    else:
        w, h = width, height
    return (width - w) // 2, (height - h) // 2, (width - w) // 2 + w, (height - h) // 2 + h


@pytest.mark.parametrize("width, height, expected", [
    (40, 900, (0, 423, 40, 476)),  # very tall: 40 x round(40 / (3/4)) = 53 high, centred
    (900, 40, (423, 0, 476, 40)),  # very wide: round(40 * 4/3) = 53 wide, centred
    (120, 100, (0, 0, 120, 100)),  # within the ratio range: the whole image
])
def test_the_crop_fallback_is_the_exact_centred_box(width, height, expected):
    """scale=(1, 1) can never fit a box of another aspect, so all ten draws miss and the fallback
    box is returned: exactly, whatever the seed."""
    for seed in range(5):
        box = random_resized_box(width, height, np.random.default_rng(seed), (1.0, 1.0), (3 / 4, 4 / 3))
        assert box == expected == _fallback(width, height, (3 / 4, 4 / 3))


def test_center_box_and_eval_has_no_flip():
    assert center_box(300, 200, 0.875) == (62.5, 12.5, 237.5, 187.5)
    box, flip = Augment(train=False).box(300, 200, np.random.default_rng(0))
    assert not flip and box == center_box(300, 200, 0.875)


def _shard_of(samples: int, per_shard: int) -> np.ndarray:
    return np.arange(samples) // per_shard


@pytest.mark.parametrize("world, drop_last", [(1, False), (3, False), (3, True), (4, True)])
def test_block_order_ranks_equal_disjoint_and_covering(world: int, drop_last: bool) -> None:
    shard_of = _shard_of(103, 7)
    specs = [OrderSpec(103, 5, "block", drop_last, seed=2, rank=r, world_size=world, block_shards=3,
                       shard_of=shard_of) for r in range(world)]
    per_rank = [np.concatenate(s.batches(4)) for s in specs]
    assert len({len(s) for s in specs}) == 1 and len({len(p) for p in per_rank}) == 1
    union = np.concatenate(per_rank)
    if drop_last:
        assert len(np.unique(union)) == len(union)
    else:
        assert set(union.tolist()) == set(range(103))


def test_block_order_keeps_a_bounded_set_of_shards_live() -> None:
    shard_of = _shard_of(400, 10)  # 40 shards
    spec = OrderSpec(400, 8, "block", False, seed=7, block_shards=4, shard_of=shard_of)
    order = spec.rank_indices(3)
    assert sorted(order.tolist()) == list(range(400))
    blocks = [set(shard_of[order[i:i + 40]].tolist()) for i in range(0, 400, 40)]
    assert all(len(b) == 4 for b in blocks)  # each run of 4 shards' samples comes from exactly 4 shards
    assert set().union(*blocks) == set(range(40))
    assert not np.array_equal(order, spec.rank_indices(4))  # a new shard order and mix every epoch
    assert np.array_equal(order, OrderSpec(400, 8, "block", False, seed=7, block_shards=4,
                                           shard_of=shard_of).rank_indices(3))  # pure
    within = order[:40]
    assert not np.array_equal(np.sort(within), within)  # shuffled within the block


def test_block_order_needs_shards_and_a_known_mode() -> None:
    with pytest.raises(OptionError, match="shard of every sample"):
        OrderSpec(10, 2, "block", False)
    with pytest.raises(OptionError, match="shuffle='sideways'"):
        OrderSpec(10, 2, "sideways", False)
    assert OrderSpec(10, 2, True, False).shuffle == "global" and OrderSpec(10, 2, False, False).shuffle == "none"
