"""DDP conventions (gloo, CPU): validation scores each sample once (a metric summed over 2 and 3
ranks, masked with `last_valid`, is the 1-rank value; a padded duplicate made 258 of a 257-sample
split unmasked), and a default run
prints no "Grad strides do not match bucket view strides" (channels_last batches for a model in
PyTorch's default format did)."""
from __future__ import annotations

import contextlib
import json
import os
import warnings
from collections.abc import Iterator
from pathlib import Path

import pytest

import iofeed
from helpers.gloo import report, reports

pytestmark = [pytest.mark.slow, pytest.mark.torch]  # processes started, torch imported


def _scores(ld) -> tuple[list[int], list[float]]:
    """The indices and a per-sample score (the image's mean, a stand-in for a loss) of one pass, of
    the rows `last_valid` keeps (the padding that evens the ranks' shares masked)."""
    indices, scores = [], []
    for images, labels in ld:
        valid = ld.last_valid
        indices += ld.last_indices[valid].tolist()
        scores += (images.double().mean(dim=(1, 2, 3)) + labels.double())[valid].tolist()
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
        dist.all_reduce(total)
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
    assert len({r["batches"] for r in got["ranks"]}) == 1, "every rank the same batches: 3 + 3 + 3 rows over 3 ranks"


@contextlib.contextmanager
def _stderr_to(path: Path) -> Iterator[None]:
    """This process's file descriptor 2 into `path` (PyTorch's C++ warnings are printed there)."""
    saved = os.dup(2)
    with open(path, "w") as sink:
        os.dup2(sink.fileno(), 2)
        try:
            yield
        finally:
            os.dup2(saved, 2)
            os.close(saved)


def _train_rank(rank: int, world: int, init: str, source: str, out: str, memory_format: str | None) -> None:
    """A few DDP steps of a model in PyTorch's default format (with a 1x1 convolution, as ResNets
    have: on the CPU its weight's gradient follows the input's memory format); the warnings they
    raised and what they printed."""
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel

    torch.set_num_threads(2)  # on one thread the CPU kernels give the 1x1 weight's gradient the default strides
    dist.init_process_group("gloo", init_method=init, rank=rank, world_size=world)
    try:
        torch.manual_seed(0)
        model = DistributedDataParallel(torch.nn.Sequential(
            torch.nn.Conv2d(3, 8, 3), torch.nn.ReLU(), torch.nn.Conv2d(8, 8, 1), torch.nn.AdaptiveAvgPool2d(1),
            torch.nn.Flatten(), torch.nn.Linear(8, 4)))
        optimiser = torch.optim.SGD(model.parameters(), lr=0.1)
        printed = Path(out).with_name(f"stderr-{rank}.txt")
        with _stderr_to(printed), warnings.catch_warnings(record=True) as caught, iofeed.loader(
                source, batch_size=4, image_size=32, framework="torch", workers=1,
                output=iofeed.Output(memory_format=memory_format)) as ld:
            warnings.simplefilter("always")
            for images, labels in ld:
                optimiser.zero_grad()
                torch.nn.functional.cross_entropy(model(images), labels).backward()
                optimiser.step()
        report(out, rank, [str(w.message) for w in caught] + printed.read_text().splitlines())
        dist.barrier()  # neither rank tears the group down while the other still talks through it
    finally:
        dist.destroy_process_group()  # DDP keeps the group's threads alive to the exit: see helpers/gloo.py


@pytest.mark.parametrize("memory_format", [None, "channels_last"])
def test_a_default_ddp_run_prints_no_grad_strides_warning(colour_dataset, tmp_path, monkeypatch, memory_format):
    """The default (contiguous NCHW) is silent; channels_last, opted into for a model left in the
    default format, shows the warning this test looks for."""
    import torch.multiprocessing as tmp

    for name in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"):
        monkeypatch.delenv(name, raising=False)
    out = tmp_path / "warnings.json"
    tmp.spawn(_train_rank, args=(2, f"file://{tmp_path / 'rendezvous'}", str(colour_dataset), str(out), memory_format),
              nprocs=2, join=True)
    strides = [[m for m in messages if "Grad strides do not match" in m] for messages in reports(out, 2)]
    if memory_format is None:
        assert strides == [[], []]
    else:
        assert all(strides), "the mismatch the default avoids"
