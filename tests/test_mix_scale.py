"""A mixture at LAION scale (issue 39): its epoch order made a block at a time — an epoch of 10**12
samples starts as one dataset does — with shares still exact, each source's stream whole, resume and
elastic resume still exact; and the Mix's wording and options as the docs say (block order for
local sources, the shuffles a user may name, a small streamed source's cache, the default epoch).
Pixels encode labels, so a mislabel, loss, duplicate or reorder shows end to end."""
from __future__ import annotations

import re
import tracemalloc
from collections import Counter
from pathlib import Path

import numpy as np
import pytest

import iofeed
from helpers.images import label_from_pixels, make_colour_tree
from iofeed.errors import OptionError
from iofeed.format.manifest import Manifest
from iofeed.sources import mix_order as mixorder
from iofeed.sources.mix import MixPlan, shares
from iofeed.sources.mix_order import split_counts
from iofeed.sources.order import OrderSpec

OPTIONS = dict(image_size=16, workers=1, seed=5, drop_last=False, augment=False)
DOCS = Path(__file__).resolve().parents[1] / "docs"


@pytest.fixture
def small_blocks(monkeypatch):
    """Blocks of 7 positions: a small epoch then spans many blocks and every split of the tree."""
    monkeypatch.setattr(mixorder, "LEAF", 7)


def _checked(ld, batch) -> list[int]:
    """A batch's sample indices, its labels checked against the table and the pixels."""
    images, labels = batch
    got = np.asarray(labels).tolist()
    assert got == ld.source.label[ld.last_indices].tolist()
    assert [label_from_pixels(np.asarray(im)) for im in images] == got, "pixels say the label"
    return ld.last_indices.tolist()


# ---- the order, a block at a time (39.5)


def test_an_epoch_over_many_blocks_keeps_exact_shares_and_each_source_s_stream(small_blocks):
    plan = MixPlan(sizes=(13, 5, 40), counts=(70, 120, 91))  # 281 positions: 41 blocks of 7
    assert plan.blocks == 41
    orders = [plan.order(seed=2, epoch=e) for e in range(4)]
    whole = np.concatenate(orders)
    for s, (size, base) in enumerate(zip(plan.sizes, plan.bases)):
        assert all(((o >= base) & (o < base + size)).sum() == plan.counts[s] for o in orders), "exact shares"
        stream = whole[(whole >= base) & (whole < base + size)] - base
        assert np.array_equal(stream, plan.stream(2, s, 0, 4 * plan.counts[s])), "in the source's stream order"
        for p in range(len(stream) // size):
            assert sorted(stream[p * size:(p + 1) * size].tolist()) == list(range(size)), "a pass: each once"
    rng = np.random.default_rng(0)
    for _ in range(50):
        a, b = sorted(rng.integers(0, 282, 2).tolist())
        assert np.array_equal(plan.take(2, 1, a, b), orders[1][a:b]), "any stretch is the epoch's"
        source = np.searchsorted(plan.bases, orders[1][:a], side="right") - 1
        assert plan.before(2, 1, a) == np.bincount(source, minlength=3).tolist()
    assert not np.array_equal(orders[0], orders[1]) and np.array_equal(plan.order(2, 3), orders[3])


def test_the_arrangement_is_uniform_across_blocks(small_blocks):
    """Each position holds source 0 with its share's probability (10 of 40), in the first block
    as in the last: the splits down the tree draw as a uniform shuffle of all slots would."""
    plan = MixPlan(sizes=(10, 30), counts=(10, 30))
    hits = np.zeros(40)
    for seed in range(300):
        hits += plan.order(seed, 0) < 10
    assert np.all(np.abs(hits / 300 - 0.25) < 0.1), (hits / 300).round(2)


def test_a_split_past_numpy_s_hypergeometric_limit_stays_feasible_and_fair():
    counts = np.array([3 * 10**11, 7 * 10**11 - 5, 5], np.int64)
    rng = np.random.default_rng(1)
    for left in (5 * 10**11, 10**12 - 3, 1, 10**12):
        got = split_counts(counts, left, rng)
        assert got.sum() == left and np.all(got >= 0) and np.all(got <= counts)
    got = split_counts(counts, 5 * 10**11, rng)
    assert abs(got[0] / 1.5e11 - 1) < 1e-3, got


def test_an_epoch_of_10_12_samples_starts_holding_a_few_blocks_not_the_epoch(colour_dataset, small_dataset):
    """The whole order used to be made up front: "Unable to allocate 7.28 TiB" at 10**12."""
    mix = iofeed.Mix({str(colour_dataset): 1, str(small_dataset): 1}, epoch_samples=10**12)
    tracemalloc.start()
    try:
        with iofeed.loader(mix, batch_size=4, **OPTIONS) as ld:
            assert len(ld) == 10**12 // 4
            indices = _checked(ld, next(iter(ld)))
            _, peak = tracemalloc.get_traced_memory()
            state = ld.state_dict()
    finally:
        tracemalloc.stop()
    assert peak < 64 << 20, f"{peak:,} bytes traced"
    assert indices == ld.order.plan.take(5, 0, 0, 4).tolist()
    source = ld.mixture.source_of(np.array(indices))
    assert state["samples_done"] == 4 and state["mixture"]["positions"] == np.bincount(source, minlength=2).tolist()


@pytest.mark.parametrize("world, batch", [(3, 5), (2, 4), (8, 2)])
def test_a_mixture_order_over_many_blocks_resumes_on_another_layout_each_sample_once(small_blocks, world, batch):
    plan = MixPlan(sizes=(13, 5, 40), counts=(40, 30, 33))

    def run(world, batch, done=0, first=0, stop=None):
        return [list(OrderSpec(103, batch, "mix", False, seed=4, rank=r, world_size=world, plan=plan)
                     .batches(1, done, first)[first:stop]) for r in range(world)]

    before = run(4, 3, stop=3)  # 36 of the epoch's 103
    after = run(world, batch, done=36, first=3)
    assert len({len(r) for r in after}) == 1, "equal batches per rank after the change"
    seen = Counter(np.concatenate([b for r in before + after for b in r]).tolist())
    epoch = Counter(plan.order(4, 1).tolist())
    assert seen - epoch == Counter() or sum((seen - epoch).values()) == -(103 - 36) % world, "only padding repeats"
    assert epoch - seen == Counter(), "every sample of the epoch"
    done = np.concatenate([b for r in before for b in r])
    assert sorted(done.tolist()) == sorted(plan.order(4, 1)[:36].tolist()), "the batches done are a prefix"


@pytest.mark.filterwarnings("ignore:the resumed epoch holds")  # more batches than a whole epoch: expected
def test_a_mixture_of_10_9_samples_stopped_on_2_ranks_resumes_on_3(colour_dataset, small_dataset):
    """Resume and elastic resume on the new order, at the scale it is for: each rank's batches after
    the resume are the global order's next stretch dealt to 3 ranks, the state's source positions
    the order's, and the pixels say the labels."""
    mix = iofeed.Mix({str(colour_dataset): 3, str(small_dataset): 1}, epoch_samples=10**9)
    states, before = [], []
    for rank in range(2):
        with iofeed.loader(mix, batch_size=4, placement=iofeed.Placement(rank=rank, world_size=2), **OPTIONS) as ld:
            it = iter(ld)
            for _ in range(3):
                before += _checked(ld, next(it))
            states.append(ld.state_dict())
    plan, seed = ld.order.plan, ld.order.seed
    assert states[0] == states[1] and states[0]["samples_done"] == 24
    assert sorted(before) == sorted(plan.take(seed, 0, 0, 24).tolist()), "the batches done are a prefix"
    counts = [750_000_000, 250_000_000]
    assert list(plan.counts) == counts, "exact shares"
    assert states[0]["mixture"]["positions"] == plan.before(seed, 0, 24)
    for rank in range(3):
        with iofeed.loader(mix, batch_size=5, placement=iofeed.Placement(rank=rank, world_size=3), **OPTIONS) as ld:
            ld.load_state_dict(states[0])
            it = iter(ld)
            first = _checked(ld, next(it))
            assert first == plan.take(seed, 0, 24, 24 + 15)[rank::3].tolist()
            second = _checked(ld, next(it))
            assert second == plan.take(seed, 0, 39, 39 + 15)[rank::3].tolist()
            assert ld.state_dict()["mixture"]["positions"] == plan.before(seed, 0, 54)


def test_the_prefetcher_reads_a_long_pass_a_window_at_a_time():
    """A streamed mixture's pass may hold millions of batches: the prefetcher reads the shards they
    need `SCAN` batches at a time, at most `AHEAD` past the consumer, not the whole pass before the
    first download; and a pass whose few shards are all pinned at once is not read to its end
    (it was: a 10**9 epoch over a 2-shard source spun for minutes before its first batch)."""
    import os
    import threading
    import time
    from types import SimpleNamespace

    from iofeed.sources.remote.prefetch import AHEAD, MAX_PINNED, SCAN, Prefetcher

    acquired, lock = [], threading.Lock()

    def acquire(file_id: int, cancel: object = None) -> int:
        with lock:
            acquired.append(file_id)
        return os.open(os.devnull, os.O_RDONLY)

    shard_of = np.repeat(np.arange(10**4), 100)
    spec = OrderSpec(10**6, 1, "none", False)
    made = []

    class Counted:
        """The pass's batches, counting those made."""

        def __init__(self, batches):
            self.batches = batches

        def __len__(self):
            return len(self.batches)

        def __getitem__(self, k):
            if isinstance(k, slice):
                return Counted(self.batches[k])
            made.append(k)
            return self.batches[k]

        def __iter__(self):
            return (self[k] for k in range(len(self)))

    remote = SimpleNamespace(acquire=acquire, refs=[SimpleNamespace(bytes=10)] * 10**4,
                             cache=SimpleNamespace(limit=10**9))
    prefetcher = Prefetcher(remote, shard_of, Counted(spec.batches(0)), 0, lambda: [])
    try:
        deadline = time.monotonic() + 120
        while len(acquired) < 8:
            assert time.monotonic() < deadline, acquired
            time.sleep(0.01)
        time.sleep(0.2)  # the downloads done, it reads on only as far as its pins (MAX_PINNED shards of 100) reach
        bound = min(MAX_PINNED * 100, AHEAD) + SCAN
        assert len(made) <= bound and max(made) < bound, f"{len(made)} of a million batches made ahead"
        for position in range(0, 3 * SCAN, 50):
            prefetcher.advance(position)
        while len(acquired) < 3 * SCAN // 100:
            assert time.monotonic() < deadline, acquired
            time.sleep(0.01)
    finally:
        prefetcher.close()
    assert sorted(set(acquired))[: 3 * SCAN // 100] == list(range(3 * SCAN // 100)), "the shards in order of use"
    made.clear()
    two = np.arange(10**6) % 2  # two shards, both in every stretch: pinned at once, never MAX_PINNED of them
    prefetcher = Prefetcher(remote, two, Counted(spec.batches(0)), 0, lambda: [])
    try:
        time.sleep(0.5)
        assert len(made) <= AHEAD + SCAN, f"{len(made)} of a million batches made ahead"
        prefetcher.advance(5000)
        time.sleep(0.2)
        assert len(made) <= 5000 + AHEAD + 2 * SCAN and sorted(prefetcher._pins) == [0, 1]
    finally:
        prefetcher.close()


# ---- block order for local sources (39.7), the shuffles one may name (39.8)


def test_shuffle_block_reads_a_mixture_of_local_datasets_block_wise(colour_dataset, small_dataset):
    """It was refused: "shuffle='block' needs the shard of every sample"."""
    mix = iofeed.Mix({str(colour_dataset): 1, str(small_dataset): 1}, epoch_samples=64)  # 32 of each
    with iofeed.loader(mix, batch_size=4, shuffle="block", order=iofeed.Order(block_shards=1), **OPTIONS) as ld:
        assert ld.mixture.plan.kinds == ["block", "block"] and ld.state_dict()["mixture"]["orders"] == ["block"] * 2
        indices = [i for batch in ld for i in _checked(ld, batch)]
    source = ld.mixture.source_of(np.array(indices))
    assert np.bincount(source).tolist() == [32, 32], "exact shares"
    big = [i for i, s in zip(indices, source) if s == 0]
    assert sorted(big) == list(range(32)), "one whole pass of the 32-sample source"
    shard_of = ld.source.file_id[np.array(big)]
    changes = int((np.diff(shard_of) != 0).sum())
    assert len(set(shard_of.tolist())) > 1 and changes == len(set(shard_of.tolist())) - 1, \
        "block_shards=1: one shard after another, each read through before the next"


def test_order_lists_only_the_shuffles_a_user_can_name(colour_dataset, small_dataset):
    """`mix` was listed as valid; asked for with a Mix as the source it said "pass the Mix as the
    loader's source", which it was."""
    mix = iofeed.Mix({str(colour_dataset): 1, str(small_dataset): 1})
    for source in (mix, str(colour_dataset)):
        with pytest.raises(OptionError, match=r"^shuffle='mix' is not one of none, global, block$"):
            iofeed.loader(source, batch_size=4, shuffle="mix", **OPTIONS)
    with pytest.raises(OptionError) as info:
        iofeed.loader(str(colour_dataset), batch_size=4, shuffle="bogus", **OPTIONS)
    assert "mix" not in str(info.value)


# ---- a small streamed source's cache (39.9)


def test_a_cache_holding_every_shard_of_a_small_streamed_source_is_enough_for_a_mixture(colour_dataset, tmp_path):
    """A 3-shard source needs at most its 3 shards live, as the single-source loader counts: the Mix
    asked for two blocks of 8 shards that do not exist ("16,711,680 bytes this Mix keeps live")."""
    from helpers.storage import CountingServer
    from iofeed.prepare.run import preprocess

    served = tmp_path / "served"
    preprocess(make_colour_tree(tmp_path / "tree", per_class=7), served / "few.iof", val_per_class=1,
               shard_bytes=1 << 16, progress=False, workers=1)
    shards = Manifest.read(served / "few.iof").split("train", str(served / "few.iof")).shards
    largest, total = max(s["bytes"] for s in shards), sum(s["bytes"] for s in shards)
    assert 2 <= len(shards) < 16 and 2 * 8 * largest > total, "fewer shards than two blocks of 8"
    server = CountingServer(served)
    try:
        url = f"{server.url}/few.iof"
        cache = {"cache": iofeed.Cache(dir=tmp_path / "cache", limit=total)}
        with iofeed.loader(url, batch_size=4, **OPTIONS, **cache) as alone:
            assert sorted(i for batch in alone for i in _checked(alone, batch)) == list(range(24))
        mix = iofeed.Mix({str(colour_dataset): 1, url: 1}, epoch_samples=48)
        with iofeed.loader(mix, batch_size=4, **OPTIONS, **cache) as ld:
            assert ld.mixture.plan.kinds == ["global", "block"]
            indices = [i for batch in ld for i in _checked(ld, batch)]
        assert sorted(i - 32 for i in indices if i >= 32) == list(range(24)), "every sample of the streamed source"
        with pytest.raises(OptionError, match="cannot hold the .* bytes this Mix keeps live"):
            iofeed.loader(mix, batch_size=4, **OPTIONS, cache=iofeed.Cache(dir=tmp_path / "cache", limit=largest))
    finally:
        server.close()


# ---- the default epoch, as the words say (39.11)


def test_the_default_epoch_is_the_sources_sizes_added_up_and_shared_by_weight(colour_dataset, small_dataset,
                                                                              colour_tree, capsys):
    """Sizes 32, 8 and 40 at weights 1:1:1 give 27, 27 and 26, not each source once: the Mix
    docstring and docs/formats.md said "every source once at its natural size"."""
    from iofeed.cli.mix_inspect import print_mixture

    mix = iofeed.Mix({str(colour_dataset): 1, str(small_dataset): 1, str(colour_tree): 1})
    with iofeed.loader(mix, batch_size=4, **OPTIONS) as ld:
        assert ld.mixture.sizes == [32, 8, 40] and list(ld.mixture.plan.counts) == shares([1, 1, 1], 80) == \
            [27, 27, 26]
    print_mixture(mix)
    assert re.search(r"small.iof: 8 samples, weight 1, 27 per epoch: 3.38 passes", capsys.readouterr().out)
    docs = (DOCS / "formats.md").read_text(encoding="utf-8")
    for words in (iofeed.Mix.__doc__, docs):
        flat = " ".join(words.split())
        assert "natural size" not in flat
        assert "shared out by the weights" in flat


def test_a_state_of_the_order_before_blocks_resumes_at_an_epoch_s_start_only(colour_dataset, small_dataset):
    """A state saved mid-epoch by the iofeed whose mixture order was one permutation of the slots
    (no `interleave` entry) did the first samples of another order: its positions may even agree
    by chance, and resuming would repeat and miss samples. At an epoch's start nothing of it was used."""
    mix = iofeed.Mix({str(colour_dataset): 1, str(small_dataset): 1}, epoch_samples=40)
    with iofeed.loader(mix, batch_size=4, **OPTIONS) as ld:
        at_start = ld.state_dict()
        next(iter(ld))
        mid = ld.state_dict()
    assert mid["mixture"]["interleave"] == "blocks"

    def older(state):
        return {**state, "mixture": {k: v for k, v in state["mixture"].items() if k != "interleave"}}

    with iofeed.loader(mix, batch_size=4, **OPTIONS) as ld:
        with pytest.raises(OptionError, match="^cannot resume: the state was saved mid-epoch by an iofeed whose "
                                              "mixture order interleaves the sources otherwise"):
            ld.load_state_dict(older(mid))
        ld.load_state_dict(older({**at_start, "epoch": 3, "mixture": {**at_start["mixture"],
                                                                       "positions": [60, 60]}}))
        assert ld.epoch == 3 and len([i for batch in ld for i in _checked(ld, batch)]) == 40
        ld.load_state_dict(mid)


def test_shares_of_an_epoch_past_2_53_samples_are_counted_in_ints():
    """`math.ceil(remaining / world_size)` rounded in floats: 10**17 + 1 samples on 2 ranks gave each
    5·10**16, and one sample was dealt to no rank."""
    spec = OrderSpec(10**17 + 1, 3, "none", False, rank=1, world_size=2)
    assert spec.per_rank == 5 * 10**16 + 1 and len(spec) == (5 * 10**16 + 1) // 3
    last = spec.batches(0)[len(spec) - 1]
    # the last round (5 samples) is dealt in runs, rank 0's first: rank 1 takes its last 2, then a repeat
    assert last.tolist() == [10**17 - 1, 10**17, 0], "rank 1's run of the last round, then padding from the start"
