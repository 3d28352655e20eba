"""Every rank delivers exactly `len()` batches, as full as planned, whatever is skipped: a skipped
sample's place goes to a spare one (engines/refill.py), on both engines, and a resume mid-epoch
still yields exactly the rest of the epoch."""
from __future__ import annotations

import hashlib
import os

import numpy as np
import pytest

import iofeed
from helpers.images import label_from_pixels, make_colour_tree
from helpers.runs import state_after

ENGINES = ["workers", pytest.param("dali", marks=pytest.mark.dali)]
SMALL = {"image_size": 32, "workers": 1}


def _epoch(ld) -> list[tuple[list[int], str]]:
    """(sample indices, pixel digest) of each batch of the loader's next epoch; labels checked against pixels."""
    out = []
    for images, labels in ld:
        assert [label_from_pixels(image) for image in images] == labels.tolist()
        out.append((ld.last_indices.tolist(), hashlib.sha256(np.ascontiguousarray(images)).hexdigest()))
    return out


@pytest.mark.parametrize("engine", ENGINES)
def test_two_ranks_deliver_len_batches_despite_a_truncated_jpeg(tmp_path, engine):
    """Issue 29.16: batch_size=1 and one truncated JPEG gave rank 0 31 batches and rank 1 30 while
    len() said 31 for both: DDP's collectives fell out of step."""
    if engine == "dali":
        pytest.importorskip("nvidia.dali")
    root = make_colour_tree(tmp_path / "t", per_class=15, corrupt=1)  # 61 files
    counts, stats = [], []
    for rank in (0, 1):
        with iofeed.loader(root, batch_size=1, placement=iofeed.Placement(rank=rank, world_size=2), drop_last=False,
                           engine=engine,
                           **SMALL) as ld:
            batches = _epoch(ld)
            counts.append((len(batches), len(ld), {len(indices) for indices, _ in batches}))
            stats.append(ld.stats)
    assert counts == [(31, 31, {1}), (31, 31, {1})]
    assert sum(s.skipped["corrupt or truncated image"] for s in stats) == sum(s.refilled for s in stats) == 1


def _bad_near_the_end(root, batch_size: int) -> tuple[int, int]:
    """A seed whose epoch 0 has the corrupt file in the last batch (its refill reaches into the
    next epoch), and the number of batches."""
    with iofeed.loader(root, batch_size=batch_size, drop_last=False, skips=iofeed.Skips(max_skipped=0.1),
                       **SMALL) as ld:
        bad = next(i for i in range(len(ld.source)) if os.path.basename(ld.source.path_of(i)) == "bad0.jpg")
        for seed in range(200):
            order = ld.order.__class__(**{**ld.order.__dict__, "seed": seed})
            if bad in order.batches(0)[-1]:
                return seed, len(order)
    raise AssertionError("no seed puts the corrupt file in the last batch")


@pytest.mark.parametrize("engine", ENGINES)
def test_resume_after_a_refill_yields_the_rest_exactly(tmp_path, engine):
    if engine == "dali":
        pytest.importorskip("nvidia.dali")
    root = make_colour_tree(tmp_path / "t", per_class=4, corrupt=1)  # 17 files
    seed, batches = _bad_near_the_end(root, batch_size=2)
    options = {"batch_size": 2, "drop_last": False, "seed": seed, "engine": engine,
               "skips": iofeed.Skips(max_skipped=None), **SMALL}
    with iofeed.loader(root, **options) as ld:
        full = _epoch(ld)
        assert ld.stats.refilled == 1 and len(full) == batches and all(len(i) == 2 for i, _ in full[:-1])
        ld.set_epoch(0)
        state = state_after(ld, batches - 3)
    with iofeed.loader(root, **options) as resumed:
        resumed.load_state_dict(state)
        assert _epoch(resumed) == full[batches - 3:]
        assert resumed.stats.refilled == 1


@pytest.mark.parametrize("pad", ["ranks", "none"])
@pytest.mark.parametrize("engine", ENGINES)
def test_an_evaluation_split_scores_each_readable_sample_once_despite_a_truncated_jpeg(tmp_path, engine, pad):
    """With pad="none" (each sample dealt once) the skipped sample's place stays empty: a spare
    there was scored twice (there and in its own batch). By default a spare keeps the batch's
    shape, which its peers share, and `last_valid` masks it (and the padding)."""
    if engine == "dali":
        pytest.importorskip("nvidia.dali")
    root = make_colour_tree(tmp_path / "t", per_class=4, corrupt=1)  # 17 files
    seen, shapes, refilled, skipped = [], [], 0, 0
    for rank in (0, 1):
        with iofeed.loader(root, split="val", batch_size=3, placement=iofeed.Placement(rank=rank, world_size=2),
                           skips=iofeed.Skips(max_skipped=None), engine=engine, order=iofeed.Order(pad=pad),
                           **SMALL) as ld:
            bad = next(i for i in range(len(ld.source)) if os.path.basename(ld.source.path_of(i)) == "bad0.jpg")
            shapes.append([])
            for _ in ld:
                seen += ld.last_indices[ld.last_valid].tolist()
                shapes[-1].append(len(ld.last_indices))
            refilled, skipped = refilled + ld.stats.refilled, skipped + sum(ld.stats.skipped.values())
    assert sorted(seen) == [i for i in range(17) if i != bad], "every readable sample once, none twice"
    assert (refilled, skipped) == ((1 if pad == "ranks" else 0), 1)
    if pad == "ranks":
        assert shapes[0] == shapes[1] == [3, 3, 3], "the same shapes on both ranks: 9 + 9 rows for 17 samples"


def _gloo_rank(rank: int, world: int, init: str, source: str, out: str) -> None:
    """One gloo rank: an all-reduce of the batch size at every batch, as DDP's backward does."""
    import datetime
    import json

    import torch
    import torch.distributed as dist

    torch.set_num_threads(1)
    # a bound on failure only (collectives out of step raise instead of waiting for ever)
    dist.init_process_group("gloo", init_method=init, rank=rank, world_size=world,
                            timeout=datetime.timedelta(seconds=120))
    try:
        sizes = []
        with iofeed.loader(source, batch_size=1, framework="torch", drop_last=False, **SMALL) as ld:
            for _, labels in ld:
                total = torch.tensor([len(labels)])
                dist.all_reduce(total)
                sizes.append(int(total))
            mine = {"steps": len(sizes), "len": len(ld), "sizes": sizes, "refilled": ld.stats.refilled}
        gathered: list = [None] * world
        dist.all_gather_object(gathered, mine)
        if rank == 0:
            with open(out, "w") as f:
                json.dump(gathered, f)
    finally:
        dist.destroy_process_group()


@pytest.mark.torch
@pytest.mark.slow
def test_gloo_collectives_stay_in_step_despite_a_truncated_jpeg(tmp_path, monkeypatch):
    """The issue's own run: two gloo ranks, batch_size=1, one truncated JPEG, an all-reduce per batch."""
    import json

    import torch
    import torch.multiprocessing as tmp

    if not torch.distributed.is_available():
        pytest.skip("torch.distributed is not available")
    for name in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"):
        monkeypatch.delenv(name, raising=False)
    root = make_colour_tree(tmp_path / "t", per_class=15, corrupt=1)  # 61 files: 31 batches per rank
    out = tmp_path / "ranks.json"
    tmp.spawn(_gloo_rank, args=(2, f"file://{tmp_path / 'rendezvous'}", str(root), str(out)), nprocs=2, join=True)
    ranks = json.loads(out.read_text())
    assert [(r["steps"], r["len"]) for r in ranks] == [(31, 31), (31, 31)]
    assert ranks[0]["sizes"] == ranks[1]["sizes"] == [2] * 31, "every step: one sample on each rank"
    assert sum(r["refilled"] for r in ranks) == 1


def test_a_skipped_place_goes_to_a_spare_of_the_same_part_first_then_to_any():
    """A mixture's skipped sample (`part_of`: its source) takes the first spare of its own source
    that loads, passing over other sources' spares, which stay for later skips; with none of its
    own it takes the next spare, as without parts."""
    from iofeed.engines.refill import fill

    def load(k: int, position: int, index: int, spare: bool) -> str | None:
        return "truncated" if index in (1, 13) else None

    def odd_even(index: int) -> int:  # two parts: odd and even samples
        return index % 2

    spare = np.array([10, 13, 12, 15, 14])
    assert fill(np.array([0, 1, 2]), spare, load).delivered == [0, 10, 2]
    filled = fill(np.array([0, 1, 2, 3]), spare, load, odd_even)  # 13 does not load: 15 takes 1's place
    assert filled.delivered == [0, 15, 2, 3] and filled.refilled == 1 and not filled.exhausted
    filled = fill(np.array([1, 4, 1]), np.array([10, 12, 13]), load, odd_even)  # no odd spare loads: even ones
    assert filled.delivered == [10, 4, 12] and filled.refilled == 2 and not filled.exhausted
