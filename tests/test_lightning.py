"""PyTorch Lightning drives the loader: two epochs with the right steps and a new order each, and
two DDP ranks (CPU, gloo) stepping equally over their own shares."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import iofeed

torch = pytest.importorskip("torch")
pl = pytest.importorskip("pytorch_lightning")
pytestmark = [pytest.mark.slow, pytest.mark.torch]

SRC = str(Path(__file__).resolve().parents[1] / "src")

_MODULE = """\
import torch
import pytorch_lightning as pl


class Recorder(pl.LightningModule):
    \"\"\"A linear classifier that records the labels of every training batch, per epoch.\"\"\"

    def __init__(self):
        super().__init__()
        self.net = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(3 * 16 * 16, 4))
        self.seen = {}

    def training_step(self, batch, batch_idx):
        images, labels = batch
        self.seen.setdefault(self.current_epoch, []).append(labels.tolist())
        return torch.nn.functional.cross_entropy(self.net(images), labels)

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)


def trainer(**options):
    return pl.Trainer(max_epochs=2, accelerator="cpu", logger=False, enable_checkpointing=False,
                      enable_progress_bar=False, enable_model_summary=False, **options)
"""


@pytest.fixture
def recorder(tmp_path, monkeypatch):
    (tmp_path / "recorder.py").write_text(_MODULE)
    monkeypatch.syspath_prepend(str(tmp_path))
    import recorder

    yield recorder
    sys.modules.pop("recorder", None)


def test_trainer_fit_runs_two_epochs_in_new_orders(colour_dataset, recorder):
    model = recorder.Recorder()
    with iofeed.loader(colour_dataset, batch_size=4, image_size=16, framework="torch", workers=1, seed=5) as ld:
        trainer = recorder.trainer()
        trainer.fit(model, train_dataloaders=ld)
        steps = len(ld)
        assert ld.epoch == 2
    assert steps == 8 and trainer.global_step == 2 * steps
    first, second = model.seen[0], model.seen[1]
    assert len(first) == len(second) == steps
    assert first != second, "each epoch in a new order"
    assert sorted(sum(first, [])) == sorted(sum(second, [])) == sorted([0, 1, 2, 3] * 8)


_DDP = """\
import json, sys
import iofeed
from recorder import Recorder, trainer

ld = iofeed.loader(sys.argv[1], batch_size=4, image_size=16, framework="torch", workers=1, seed=5)
model = Recorder()
fit = trainer(devices=2, strategy="ddp")
fit.fit(model, train_dataloaders=ld)
result = {"rank": fit.global_rank, "steps": fit.global_step, "batches": len(ld),
          "loader_rank": ld.stats.settings["rank"], "world": ld.stats.settings["world_size"],
          "labels": [sum(model.seen[e], []) for e in (0, 1)]}
with open(f"result-{fit.global_rank}.json", "w") as f:  # a file each: two ranks' prints interleave
    json.dump(result, f)
ld.close()
"""


def test_ddp_ranks_step_equally_over_their_shares(colour_dataset, tmp_path):
    (tmp_path / "recorder.py").write_text(_MODULE)
    (tmp_path / "ddp.py").write_text(textwrap.dedent(_DDP))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([SRC, str(tmp_path), os.environ.get("PYTHONPATH", "")])}
    out = subprocess.run([sys.executable, "ddp.py", str(colour_dataset)], cwd=tmp_path, env=env,
                         capture_output=True, text=True, timeout=400)
    assert out.returncode == 0, out.stderr[-3000:]
    results = [json.loads(p.read_text()) for p in sorted(tmp_path.glob("result-*.json"))]
    assert [r["rank"] for r in results] == [r["loader_rank"] for r in results] == [0, 1], out.stdout
    assert all(r["world"] == 2 and r["batches"] == 4 for r in results), "32 samples, 2 ranks, batch 4"
    assert results[0]["steps"] == results[1]["steps"] == 2 * 4
    for epoch in (0, 1):
        both = results[0]["labels"][epoch] + results[1]["labels"][epoch]
        assert sorted(both) == sorted([0, 1, 2, 3] * 8), "the ranks share the epoch between them"
