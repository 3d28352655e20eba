"""Validation under DDP (gloo, CPU): a metric summed over 2 and 3 ranks is the 1-rank value, each
sample scored once (a padded duplicate made 258 of a 257-sample split)."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

import iofeed

pytestmark = [pytest.mark.slow, pytest.mark.torch]  # processes started, torch imported


def _scores(ld) -> tuple[list[int], list[float]]:
    """The indices and a per-sample score (the image's mean, a stand-in for a loss) of one pass."""
    indices, scores = [], []
    for images, labels in ld:
        indices += ld.last_indices.tolist()
        scores += (images.double().mean(dim=(1, 2, 3)) + labels.double()).tolist()
    return indices, scores


def _rank(rank: int, world: int, init: str, source: str, out: str) -> None:
    import torch
    import torch.distributed as dist

    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=init, rank=rank, world_size=world)
    try:
        with iofeed.loader(source, split="val", batch_size=2, image_size=32, framework="torch", workers=1) as ld:
            batches = len(ld)
            indices, scores = _scores(ld)
        total = torch.tensor([len(scores), sum(scores)], dtype=torch.float64)
        dist.all_reduce(total)  # once, after the pass: ranks may hold different numbers of batches
        gathered: list = [None] * world
        dist.all_gather_object(gathered, {"indices": indices, "batches": batches})
        if rank == 0:
            Path(out).write_text(json.dumps({"count": total[0].item(), "sum": total[1].item(), "ranks": gathered}))
    finally:
        dist.destroy_process_group()


@pytest.mark.parametrize("world", [2, 3])
def test_a_metric_summed_over_ranks_is_the_one_rank_value(colour_dataset, tmp_path, monkeypatch, world):
    import torch.multiprocessing as tmp

    for name in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"):
        monkeypatch.delenv(name, raising=False)
    with iofeed.loader(colour_dataset, split="val", batch_size=2, image_size=32, framework="torch", workers=1) as ld:
        indices, scores = _scores(ld)
    out = tmp_path / "metric.json"
    tmp.spawn(_rank, args=(world, f"file://{tmp_path / 'rendezvous'}", str(colour_dataset), str(out)), nprocs=world,
              join=True)
    got = json.loads(out.read_text())
    assert got["count"] == len(scores) == 8
    assert got["sum"] == pytest.approx(sum(scores), rel=1e-12)
    dealt = sorted(i for r in got["ranks"] for i in r["indices"])
    assert dealt == sorted(indices) == list(range(8)), "each sample scored once"
    if world == 3:
        assert [r["batches"] for r in got["ranks"]] == [2, 2, 1], "3 + 3 + 2 samples: uneven last batches"
