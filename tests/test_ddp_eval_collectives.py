"""Validation no distributed script can hang on: real gloo process groups of 2 and 3 ranks over a
257-sample split at batch 16 (uneven over either), each loop as a real script writes it, each
reporting the split's exact accuracy (pixel-coded samples, `helpers/coded_eval.py`):

- a collective per batch (timm's `validate()` all-reduces each batch's metrics), masked with
  `loader.last_valid`;
- an all_gather of each batch's predictions, cut to `len(loader.dataset)` (accelerate's
  `gather_for_metrics`);
- torchmetrics with `dist_sync_on_step=True`, the padding masked as an ignored label;
- Lightning `strategy="ddp"`, gathering every step (`self.all_gather`) and logging with `sync_dist`;
- `Order(pad="none")`, summed locally and reduced once (pytorch/examples' `validate()`), which
  warns on a rank that runs out first.

With evaluation splits dealt once (ranks 129 and 128 samples: 9 and 8 batches) the per-batch
collectives waited for ever on the rank with one batch more, or crashed on unequal shapes. The
process groups carry a timeout, so such a hang fails the test instead of blocking it."""
from __future__ import annotations

import datetime
import json
import os
import subprocess
import sys
import textwrap
import warnings
from pathlib import Path
from typing import Any

import pytest

import iofeed
from helpers.coded_eval import EVAL_RECIPE, coded_split, exact_correct, predict
from helpers.gloo import report, reports

pytestmark = [pytest.mark.slow, pytest.mark.torch]  # processes started, torch imported

SAMPLES, BATCH = 257, 16
TIMEOUT_S = 300  # a bound on failure only: a collective out of step raises after it instead of waiting for ever
DIST_ENV = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "GROUP_RANK", "MASTER_ADDR", "MASTER_PORT")
TESTS = str(Path(__file__).resolve().parent)
SRC = str(Path(__file__).resolve().parents[1] / "src")


@pytest.fixture(scope="module")
def split(tmp_path_factory) -> tuple[str, Any, list[int]]:
    dataset, source, codes = coded_split(tmp_path_factory.mktemp("coded257"), SAMPLES)
    return str(dataset), source, codes


@pytest.fixture
def spawn(tmp_path, monkeypatch):
    """Run `rank_fn(rank, world, init, dataset, codes, out)` on `world` spawned ranks; their reports."""
    import torch.multiprocessing as tmp

    for name in DIST_ENV:  # rank and world size come from the process group
        monkeypatch.delenv(name, raising=False)

    def run(rank_fn, world: int, dataset: str, codes: list[int]) -> list[Any]:
        out = tmp_path / f"{rank_fn.__name__}.json"
        tmp.spawn(rank_fn, args=(world, f"file://{tmp_path / rank_fn.__name__}-rendezvous", dataset, codes, str(out)),
                  nprocs=world, join=True)
        return reports(out, world)

    return run


def _join(rank: int, world: int, init: str) -> None:
    import torch
    import torch.distributed as dist

    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=init, rank=rank, world_size=world,
                            timeout=datetime.timedelta(seconds=TIMEOUT_S))


def _val(dataset: str, **options: Any) -> Any:
    return iofeed.loader(dataset, split="val", batch_size=BATCH, image_size=32, framework="torch", workers=1,
                         augment=iofeed.Recipe(**EVAL_RECIPE), **options)


def _finish(rank: int, out: str, result: Any) -> None:
    import torch.distributed as dist

    report(out, rank, result)
    dist.barrier()
    dist.destroy_process_group()


def _all_reduce_each_batch(rank: int, world: int, init: str, dataset: str, codes: list[int], out: str) -> None:
    """timm's validate(): every batch's metric all-reduced over the ranks; the padding masked."""
    import torch
    import torch.distributed as dist

    _join(rank, world, init)
    correct = count = 0
    with _val(dataset) as val:
        for images, labels in val:
            preds, _ = predict(images, codes)
            valid = torch.from_numpy(val.last_valid)
            batch = torch.stack([((preds == labels) & valid).sum(), valid.sum()])
            dist.all_reduce(batch)
            correct, count = correct + int(batch[0]), count + int(batch[1])
    _finish(rank, out, {"correct": correct, "count": count})


def _all_gather_each_batch(rank: int, world: int, init: str, dataset: str, codes: list[int], out: str) -> None:
    """accelerate's gather_for_metrics: every batch's rows gathered from every rank, concatenated in
    rank order, the gathered tail past the split's length cut off."""
    import torch
    import torch.distributed as dist

    _join(rank, world, init)
    gathered = []
    with _val(dataset) as val:
        for images, labels in val:
            preds, samples = predict(images, codes)
            mine = torch.stack([preds, labels, samples], dim=1)
            every = [torch.empty_like(mine) for _ in range(world)]
            dist.all_gather(every, mine)
            gathered.append(torch.cat(every))
        scored = torch.cat(gathered)[: len(val.dataset)]
    _finish(rank, out, {"correct": int((scored[:, 0] == scored[:, 1]).sum()), "count": len(scored),
                        "samples": sorted(scored[:, 2].tolist())})


def _torchmetrics_synced_each_step(rank: int, world: int, init: str, dataset: str, codes: list[int],
                                   out: str) -> None:
    """torchmetrics' Accuracy with dist_sync_on_step=True: its state all-gathered at every step. The
    padding is masked as an ignored label, not cut out: a rank's last batch may be all padding
    (257 over 2 ranks: rank 1's 1-row last batch), and torchmetrics refuses an empty update."""
    import torch
    from torchmetrics.classification import MulticlassAccuracy

    _join(rank, world, init)
    accuracy = MulticlassAccuracy(num_classes=3, average="micro", ignore_index=-1, dist_sync_on_step=True)
    with _val(dataset) as val:
        for images, labels in val:
            preds, _ = predict(images, codes)
            accuracy(preds, labels.where(torch.from_numpy(val.last_valid), -1))
    _finish(rank, out, {"accuracy": float(accuracy.compute())})


def _summed_once_uneven(rank: int, world: int, init: str, dataset: str, codes: list[int], out: str) -> None:
    """pytorch/examples' validate(): counts summed on the rank, all-reduced once after the pass, on
    an order that deals each sample once (`pad="none"`)."""
    import torch
    import torch.distributed as dist

    _join(rank, world, init)
    counts = torch.zeros(2, dtype=torch.int64)
    with warnings.catch_warnings(record=True) as caught, _val(dataset, order=iofeed.Order(pad="none")) as val:
        warnings.simplefilter("always")
        for _ in range(2):  # two validations: the warning comes once
            for images, labels in val:
                preds, _ = predict(images, codes)
                counts += torch.stack([(preds == labels).sum(), torch.tensor(len(labels))])
        batches = len(val)
    dist.all_reduce(counts)
    _finish(rank, out, {"correct": int(counts[0]) // 2, "count": int(counts[1]) // 2, "batches": batches,
                        "warnings": [str(w.message) for w in caught if "rank 0 has" in str(w.message)]})


@pytest.mark.parametrize("world", [2, 3])
def test_a_loop_that_all_reduces_each_batch_ends_with_the_exact_accuracy(split, spawn, world):
    dataset, source, codes = split
    results = spawn(_all_reduce_each_batch, world, dataset, codes)
    assert results == [{"correct": exact_correct(source), "count": SAMPLES}] * world


@pytest.mark.parametrize("world", [2, 3])
def test_a_loop_that_all_gathers_each_batch_cut_to_the_dataset_length_is_exact(split, spawn, world):
    dataset, source, codes = split
    results = spawn(_all_gather_each_batch, world, dataset, codes)
    assert results == [{"correct": exact_correct(source), "count": SAMPLES, "samples": list(range(SAMPLES))}] * world


@pytest.mark.parametrize("world", [2, 3])
def test_torchmetrics_synced_on_every_step_ends_with_the_exact_accuracy(split, spawn, world):
    pytest.importorskip("torchmetrics")
    dataset, source, codes = split
    results = spawn(_torchmetrics_synced_each_step, world, dataset, codes)
    assert [r["accuracy"] for r in results] == [pytest.approx(exact_correct(source) / SAMPLES, abs=1e-6)] * world


@pytest.mark.parametrize("world", [2, 3])
def test_pad_none_summed_once_is_exact_and_a_rank_that_runs_out_first_warns_once(split, spawn, world):
    """257 over 2 ranks: 129 + 128 samples, 9 and 8 batches, so rank 1 warns; over 3 ranks (86 + 86 +
    85) every rank has 6 batches and none warns."""
    dataset, source, codes = split
    results = spawn(_summed_once_uneven, world, dataset, codes)
    assert all((r["correct"], r["count"]) == (exact_correct(source), SAMPLES) for r in results)
    if world == 2:
        assert [r["batches"] for r in results] == [9, 8]
        assert [len(r["warnings"]) for r in results] == [0, 1], "once, on the rank that ran out"
        assert "rank 1 has delivered its last batch of split 'val' (8) while rank 0 has 9" in results[1]["warnings"][0]
        assert "(129 + 128)" in results[1]["warnings"][0]
    else:
        assert [r["batches"] for r in results] == [6, 6, 6] and not any(r["warnings"] for r in results)


_LIGHTNING = """\
import datetime, json, sys
import torch
import pytorch_lightning as pl
from pytorch_lightning.strategies import DDPStrategy
import iofeed
from helpers.coded_eval import EVAL_RECIPE, predict

dataset, world, codes, timeout = sys.argv[1], int(sys.argv[2]), json.loads(sys.argv[3]), float(sys.argv[4])


class Scorer(pl.LightningModule):
    \"\"\"Gathers every step's predictions from every rank (self.all_gather) and logs masked counts.\"\"\"

    def __init__(self):
        super().__init__()
        self.rows = []

    def validation_step(self, batch, batch_idx):
        images, labels = batch
        preds, samples = predict(images, codes)
        self.rows.append(self.all_gather(torch.stack([preds, labels, samples], dim=1)).reshape(-1, 3))
        valid = torch.from_numpy(self.trainer.val_dataloaders.last_valid)
        self.log("correct", ((preds == labels) & valid).sum().float(), sync_dist=True, reduce_fx="sum")
        self.log("count", valid.sum().float(), sync_dist=True, reduce_fx="sum")

    def on_validation_epoch_end(self):
        self.scored = torch.cat(self.rows)[: len(self.trainer.val_dataloaders.dataset)]


val = iofeed.loader(dataset, split="val", batch_size=16, image_size=32, framework="torch", workers=1,
                    augment=iofeed.Recipe(**EVAL_RECIPE))
model = Scorer()
trainer = pl.Trainer(accelerator="cpu", devices=world, logger=False, enable_progress_bar=False,
                     enable_model_summary=False, enable_checkpointing=False,
                     strategy=DDPStrategy(process_group_backend="gloo", timeout=datetime.timedelta(seconds=timeout)))
logged = trainer.validate(model, dataloaders=val)[0]
scored = model.scored
result = {"logged": [int(logged["correct"]), int(logged["count"])],
          "gathered": [int((scored[:, 0] == scored[:, 1]).sum()), len(scored)],
          "samples": sorted(scored[:, 2].tolist())}
with open(f"result-{trainer.global_rank}.json", "w") as f:  # a file each: the ranks' prints interleave
    json.dump(result, f)
val.close()
"""


@pytest.mark.parametrize("world", [2, 3])
def test_lightning_ddp_gathering_every_step_ends_with_the_exact_accuracy(split, tmp_path, world):
    pytest.importorskip("pytorch_lightning")
    dataset, source, codes = split
    (tmp_path / "score.py").write_text(textwrap.dedent(_LIGHTNING))
    env = {k: v for k, v in os.environ.items() if k not in DIST_ENV}
    env["PYTHONPATH"] = os.pathsep.join([SRC, TESTS, os.environ.get("PYTHONPATH", "")])
    # the timeout bounds a failure only: the process group's own timeout ends a hang long before it
    out = subprocess.run([sys.executable, "score.py", dataset, str(world), json.dumps(codes), str(TIMEOUT_S)],
                         cwd=tmp_path, env=env, capture_output=True, text=True, timeout=900)
    assert out.returncode == 0, out.stderr[-3000:]
    results = [json.loads((tmp_path / f"result-{rank}.json").read_text()) for rank in range(world)]
    exact = [exact_correct(source), SAMPLES]
    assert results == [{"logged": exact, "gathered": exact, "samples": list(range(SAMPLES))}] * world
