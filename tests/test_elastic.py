"""Elastic resume: a state taken at one world size and batch size continues at others, every sample
of the epoch exactly once over both runs (padding aside); states are checked key by key."""
from __future__ import annotations

import shutil
from collections import Counter
from pathlib import Path

import numpy as np
import pytest

import iofeed
from iofeed.errors import OptionError
from iofeed.loading.resume import earliest
from iofeed.sources.order import OrderSpec

SHUFFLES = ["global", "block"]
AFTER = [(2, 4), (3, 4), (8, 4), (4, 3), (3, 5)]  # (world size, batch size) of the resumed run


def _spec(shuffle: str, world: int, batch: int, rank: int = 0, drop_last: bool = False) -> OrderSpec:
    return OrderSpec(103, batch, shuffle, drop_last, seed=4, rank=rank, world_size=world, block_shards=3,
                     shard_of=np.arange(103) // 7)


def _run(shuffle: str, world: int, batch: int, epoch: int, done: int = 0, first: int = 0,
         stop: int | None = None, drop_last: bool = False) -> list[list[np.ndarray]]:
    """Each rank's batches of `epoch` from (done, first), up to batch `stop`."""
    return [_spec(shuffle, world, batch, rank, drop_last).batches(epoch, done, first)[first:stop]
            for rank in range(world)]


def _padding(remaining: int, world: int) -> int:
    return -remaining % world


@pytest.mark.parametrize("shuffle", SHUFFLES)
@pytest.mark.parametrize("world, batch", AFTER)
def test_order_resumed_on_another_layout_covers_the_epoch_once(shuffle, world, batch):
    k = 3  # batches done by each of 4 ranks of 4
    before = _run(shuffle, 4, 4, epoch=1, stop=k)
    after = _run(shuffle, world, batch, epoch=1, done=k * 16, first=k)
    assert len({len(r) for r in after}) == 1, "equal batches per rank after the change"
    assert all(len(b) == 4 for r in before for b in r)
    seen = Counter(np.concatenate([b for r in before + after for b in r]).tolist())
    assert set(seen) == set(range(103))
    extra = sum(seen.values()) - 103
    assert extra == _padding(103 - k * 16, world) and extra < world, "only the padding repeats"
    assert sorted(np.concatenate([b for r in before for b in r]).tolist()) == \
        sorted(OrderSpec(103, 1, shuffle, False, seed=4, block_shards=3,
                         shard_of=np.arange(103) // 7).rank_indices(1)[: k * 16].tolist()), \
        "the batches done are a prefix of the global order"


@pytest.mark.parametrize("shuffle", SHUFFLES)
def test_order_resumed_on_the_same_layout_is_the_uninterrupted_epoch(shuffle):
    whole = _run(shuffle, 4, 4, epoch=2)
    resumed = _run(shuffle, 4, 4, epoch=2, done=3 * 16, first=3)
    assert len(resumed[0]) == len(whole[0]) - 3 > 0
    assert all(all(np.array_equal(a, b) for a, b in zip(x, y[3:], strict=True))
               for x, y in zip(resumed, whole, strict=True))


@pytest.mark.parametrize("shuffle", SHUFFLES)
def test_order_resumed_twice_and_continued_on_its_layout(shuffle):
    """4 ranks of 4 -> 3 ranks of 5 -> 8 ranks of 2; and a resume of the middle run on its own layout
    continues it exactly (the progress of a resumed run is still a prefix)."""
    first = _run(shuffle, 4, 4, epoch=0, stop=2)  # 32 samples
    second = _run(shuffle, 3, 5, epoch=0, done=32, first=2, stop=4)  # batches 2, 3: 30 samples
    third = _run(shuffle, 8, 2, epoch=0, done=62, first=4)
    seen = Counter(np.concatenate([b for r in first + second + third for b in r]).tolist())
    assert set(seen) == set(range(103)) and sum(seen.values()) - 103 == _padding(41, 8)
    whole_second = _run(shuffle, 3, 5, epoch=0, done=32, first=2)
    again = _run(shuffle, 3, 5, epoch=0, done=62, first=4)
    assert all(all(np.array_equal(a, b) for a, b in zip(x[2:], y, strict=True))
               for x, y in zip(whole_second, again, strict=True))


def test_order_resumed_with_drop_last_repeats_nothing():
    before = _run("global", 4, 4, epoch=0, stop=3, drop_last=True)
    after = _run("global", 3, 5, epoch=0, done=48, first=3, drop_last=True)
    delivered = np.concatenate([b for r in before + after for b in r])
    assert len(np.unique(delivered)) == len(delivered)
    assert 103 - len(delivered) < 3 * 5 + 3, "drops less than one round of the new layout"
    assert len({len(r) for r in after}) == 1


# ---- loaders: 4 ranks simulated in one process (numpy, workers engine), resumed on other layouts


def _take(ld, batches: int | None) -> list[int]:
    out = []
    for k, (_, labels) in enumerate(ld, start=1):
        assert np.asarray(labels).tolist() == ld.source.label[ld.last_indices].tolist()
        out += ld.last_indices.tolist()
        if k == batches:
            break
    return out


def _ranks(source: Path, world: int, batch: int, state: dict | None, batches: int | None, **options):
    """Each rank's samples (`batches` of them, or the rest of the epoch) and its state after."""
    seen, states, counts = [], [], []
    for rank in range(world):
        with iofeed.loader(source, batch_size=batch, placement=iofeed.Placement(rank=rank, world_size=world),
                           **options) as ld:
            if state is not None:
                ld.load_state_dict(state)
            counts.append(len(ld))
            seen.append(_take(ld, batches))
            states.append(ld.state_dict())
    return seen, states, counts


OPTIONS = dict(image_size=16, workers=1, seed=3, drop_last=False)


@pytest.mark.slow
@pytest.mark.parametrize("shuffle", SHUFFLES)
def test_loaders_stopped_at_4_ranks_resume_at_2_3_8_and_another_batch_size(colour_dataset, shuffle):
    options = dict(OPTIONS, shuffle=shuffle, order=iofeed.Order(block_shards=2))
    before, states, _ = _ranks(colour_dataset, 4, 2, None, 2, **options)
    assert all(s == states[0] for s in states), "every rank saves the same state"
    assert states[0]["samples_done"] == 16 and states[0]["batches_done"] == 2
    total = len(iofeed.loader(colour_dataset, batch_size=2, workers=1).source)
    for world, batch in [(2, 2), (3, 2), (8, 2), (4, 3)]:
        after, ends, counts = _ranks(colour_dataset, world, batch, states[0], None, **options)
        assert len({len(a) for a in after}) == 1, f"{world}x{batch}: equal shares"
        seen = Counter(sum(before + after, []))
        assert set(seen) == set(range(total)), f"{world}x{batch}: every sample"
        assert sum(seen.values()) - total == _padding(total - 16, world), f"{world}x{batch}: only padding repeats"
        assert all(e["epoch"] == 1 and e["samples_done"] == 0 for e in ends), "the epoch ended"


@pytest.mark.slow
def test_dali_engine_resumes_elastically_like_the_workers_engine(colour_dataset):
    pytest.importorskip("nvidia.dali")
    options = dict(OPTIONS, shuffle="global")
    _, states, _ = _ranks(colour_dataset, 4, 2, None, 2, **options)
    workers, _, _ = _ranks(colour_dataset, 3, 3, states[0], None, **options)
    dali, _, _ = _ranks(colour_dataset, 3, 3, states[0], None, engine="dali", **options)
    assert dali == workers and sum(len(d) for d in dali) > 0


@pytest.mark.slow
@pytest.mark.torchvision
def test_nvjpeg_engine_resumes_elastically_like_the_workers_engine(colour_dataset):
    """Stopped on 4 ranks by the workers engine, resumed on 3 ranks of another batch size by the nvjpeg
    engine (its CPU form): the same samples on each rank, and labels that match (`_take`)."""
    options = dict(OPTIONS, shuffle="global")
    _, states, _ = _ranks(colour_dataset, 4, 2, None, 2, **options)
    workers, _, _ = _ranks(colour_dataset, 3, 3, states[0], None, **options)
    nvjpeg, ends, _ = _ranks(colour_dataset, 3, 3, states[0], None, engine="nvjpeg", **options)
    assert nvjpeg == workers and sum(len(d) for d in nvjpeg) > 0
    assert all(e["epoch"] == 1 and e["samples_done"] == 0 for e in ends), "the epoch ended"


def test_a_resumed_epoch_counts_its_earlier_batches_in_len(colour_dataset):
    """len() is the most batches an epoch holds: a resumed one holds those done before (Lightning's
    restored counter starts there) and the rest on the new layout, here more than a whole epoch."""
    with iofeed.loader(colour_dataset, batch_size=2, **OPTIONS) as ld:
        _take(ld, 3)  # 6 of 32 samples
        state = ld.state_dict()
    with iofeed.loader(colour_dataset, batch_size=2, placement=iofeed.Placement(rank=0, world_size=4), **OPTIONS) as ld:
        with pytest.warns(UserWarning, match="holds 7 batches .* whole epoch's 4"):
            ld.load_state_dict(state)
        assert len(ld) == 3 + 4 == 7, "26 samples left: 7 per rank, 4 batches of 2"
        assert len(_take(ld, None)) == 7 and ld.epoch == 1
        assert len(ld) == 4, "whole epochs again"
    with iofeed.loader(colour_dataset, batch_size=2, placement=iofeed.Placement(world_size=1, rank=0), **OPTIONS) as ld:
        ld.load_state_dict(state)
        assert len(ld) == 16 and len(_take(ld, None)) == 26, "fewer than a whole epoch: len stays"


# ---- the state's identity and its checks


def test_a_state_of_another_dataset_with_as_many_samples_is_refused(colour_tree, tmp_path):
    other = tmp_path / "other"
    shutil.copytree(colour_tree, other)
    classes = sorted(p for p in other.iterdir() if p.is_dir())
    moved = sorted(classes[0].iterdir())[0]
    moved.rename(classes[1] / f"moved-{moved.name}")  # the same images, one of them in another class
    with iofeed.loader(colour_tree, batch_size=4, workers=1) as a, iofeed.loader(other, batch_size=4, workers=1) as b:
        assert len(a.source) == len(b.source)
        with pytest.raises(OptionError, match=r"^cannot resume: state has dataset='[0-9a-f]+' \(another dataset"):
            b.load_state_dict(a.state_dict())
        a.load_state_dict(a.state_dict())  # its own is accepted


BAD = [
    (["epoch", 1], "must be the dict state_dict\\(\\) returned, got list"),
    ({"batches_done": 2.5}, "batches_done=2.5, expected an int in 0..12"),
    ({"epoch": -5}, "epoch=-5, expected an int >= 0"),
    ({"epoch": True}, "epoch=True"),
    ({"samples_done": 33}, "samples_done=33, expected an int in 0..32"),
    ({"samples_done": "12"}, "samples_done='12'"),
    ({"version": 7}, "version=7 comes from a newer iofeed"),
    ({"seed": 4}, "state has seed=4, this loader 3"),
    ({"shuffle": "block"}, "state has shuffle='block', this loader 'global'"),
    ({"surprise": 1}, "unknown key 'surprise'"),
    ({"samples_done": None}, "samples_done=None"),
]


@pytest.mark.parametrize("change, message", BAD, ids=[m.split(",")[0][:30] for _, m in BAD])
def test_malformed_states_are_refused_naming_the_key(colour_dataset, change, message):
    with iofeed.loader(colour_dataset, batch_size=4, workers=1, seed=3) as ld:
        state = dict(ld.state_dict(), samples_done=12, batches_done=3)
        bad = change if isinstance(change, list) else {**state, **change}
        with pytest.raises(OptionError, match=message):
            ld.load_state_dict(bad)
        missing = dict(state)
        del missing["samples_done"]
        with pytest.raises(OptionError, match="has no 'samples_done'"):
            ld.load_state_dict(missing)
        assert ld.epoch == 0 and ld.state_dict()["samples_done"] == 0, "a refused state changes nothing"


def test_a_state_from_before_version_2_continues_on_another_world_size(colour_dataset):
    """The old state (batches per rank, batch size, world size) maps onto the same global order."""
    options = dict(OPTIONS, shuffle="global")
    before, _, _ = _ranks(colour_dataset, 2, 4, None, 1, **options)
    old = {"epoch": 0, "batches_done": 1, "seed": 3, "samples": 32, "batch_size": 4, "rank": 1,
           "world_size": 2, "shuffle": "global", "block_shards": 8}
    with iofeed.loader(colour_dataset, batch_size=3, **options) as ld:
        with pytest.warns(UserWarning, match="does not name its dataset"):
            ld.load_state_dict(old)
        rest = _take(ld, None)
    assert sorted(sum(before, []) + rest) == list(range(32))
    with iofeed.loader(colour_dataset, batch_size=3, **options) as ld, pytest.raises(OptionError, match="seed=9"):
        ld.load_state_dict({**old, "seed": 9})


def test_earliest_picks_the_rank_least_far_on():
    base = {"version": 2, "dataset": "ab", "samples": 10, "seed": 0, "shuffle": "global", "block_shards": 8}
    states = [{**base, "epoch": 1, "samples_done": 4, "batches_done": 2},
              {**base, "epoch": 1, "samples_done": 2, "batches_done": 1},
              {**base, "epoch": 2, "samples_done": 0, "batches_done": 0}]
    assert earliest(states) is states[1]
    with pytest.raises(OptionError, match="dataset differs"):
        earliest([*states, {**states[0], "dataset": "cd"}])
    with pytest.raises(OptionError, match="one or more"):
        earliest([])
    with pytest.raises(OptionError, match="epoch='1'"):
        earliest([*states, {**states[0], "epoch": "1"}])


# ---- real processes: torch.distributed.checkpoint over gloo, 2 ranks stopped, 3 ranks resumed


def _dcp_rank(rank: int, world: int, phase: str, folder: str) -> None:
    """One gloo rank: phase "stop" reads 2 batches of 2 and saves {"loader": loader} with
    torch.distributed.checkpoint; phase "resume" (batches of 3) loads it and reads the rest."""
    import json

    import torch.distributed as dist
    import torch.distributed.checkpoint as dcp

    dist.init_process_group("gloo", init_method=f"file://{folder}/rendezvous-{phase}", rank=rank, world_size=world)
    try:
        batch = 2 if phase == "stop" else 3
        with iofeed.loader(f"{folder}/data", batch_size=batch, **OPTIONS) as ld:  # rank from the group
            if phase == "resume":
                dcp.load({"loader": ld}, checkpoint_id=f"{folder}/checkpoint")
            loaded = ld.state_dict()
            seen = _take(ld, 2 if phase == "stop" else None)
            if phase == "stop":
                dcp.save({"loader": ld}, checkpoint_id=f"{folder}/checkpoint")
            result = {"rank": ld.order.rank, "world": ld.order.world_size, "seen": seen, "loaded": loaded,
                      "state": ld.state_dict()}
        Path(f"{folder}/{phase}-{rank}.json").write_text(json.dumps(result))
        dist.barrier()
    finally:
        dist.destroy_process_group()


@pytest.mark.slow
@pytest.mark.torch
def test_dcp_checkpoint_of_2_gloo_ranks_resumes_on_3(colour_dataset, tmp_path, monkeypatch):
    import json

    import torch.multiprocessing as tmp

    for name in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"):
        monkeypatch.delenv(name, raising=False)
    (tmp_path / "data").symlink_to(colour_dataset)
    tmp.spawn(_dcp_rank, args=(2, "stop", str(tmp_path)), nprocs=2, join=True)
    tmp.spawn(_dcp_rank, args=(3, "resume", str(tmp_path)), nprocs=3, join=True)
    stop = [json.loads((tmp_path / f"stop-{r}.json").read_text()) for r in range(2)]
    resume = [json.loads((tmp_path / f"resume-{r}.json").read_text()) for r in range(3)]
    assert [(r["rank"], r["world"]) for r in stop + resume] == [(r, 2) for r in range(2)] + [(r, 3) for r in range(3)]
    saved = stop[0]["state"]
    assert all(r["state"] == saved for r in stop) and saved["samples_done"] == 8
    assert all(r["loaded"] == saved for r in resume), "the checkpoint round trip gives the state back"
    assert len({len(r["seen"]) for r in resume}) == 1
    seen = Counter(sum((r["seen"] for r in stop + resume), []))
    assert set(seen) == set(range(32)) and sum(seen.values()) - 32 == _padding(24, 3)
    assert all(r["state"]["epoch"] == 1 for r in resume)
