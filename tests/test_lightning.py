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


class Validating(Recorder):
    \"\"\"Records the labels of every validation batch too, per epoch ("sanity" for the sanity check).\"\"\"

    def __init__(self):
        super().__init__()
        self.validated = {}

    def validation_step(self, batch, batch_idx):
        images, labels = batch
        key = "sanity" if self.trainer.sanity_checking else str(self.current_epoch)
        self.validated.setdefault(key, []).extend(labels.tolist())


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


def test_the_first_validation_after_the_sanity_check_covers_the_whole_split(colour_dataset, recorder):
    """Lightning's sanity check takes 2 validation batches (`num_sanity_val_steps=2`, its default)
    and breaks out: the first validation then covered the split from its third batch on."""
    model = recorder.Validating()
    options = {"batch_size": 2, "image_size": 16, "framework": "torch", "workers": 1}
    with iofeed.loader(colour_dataset, seed=5, **options) as train, \
            iofeed.loader(colour_dataset, split="val", **options) as val:
        labels = [int(label) for label in val.source.label]
        recorder.trainer().fit(model, train_dataloaders=train, val_dataloaders=val)
    assert model.validated["sanity"] == labels[:4]
    assert model.validated["0"] == model.validated["1"] == labels, "the whole split, once, at every validation"


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


class _Preempted(Exception):
    """Raised by the test's callback right after a mid-epoch checkpoint, as a preemption would end a job."""


def _preempted_run(dataset, recorder, checkpoint, batch_size, stop_after=None, ckpt_path=None):
    """A fit over 2 epochs recording the samples of each epoch; with `stop_after`, a checkpoint is
    saved after that many batches and the run ends (`_Preempted`)."""

    class Record(pl.Callback):
        def __init__(self):
            self.seen = {}

        def on_train_batch_end(self, trainer, module, outputs, batch, batch_idx):
            self.seen.setdefault(trainer.current_epoch, []).extend(ld.last_indices.tolist())
            if batch_idx + 1 == stop_after:
                trainer.save_checkpoint(checkpoint)
                raise _Preempted

    record = Record()
    with iofeed.loader(dataset, batch_size=batch_size, image_size=16, framework="torch", workers=1, seed=5,
                       drop_last=False) as ld:
        trainer = recorder.trainer(callbacks=[record])
        if stop_after is None:
            trainer.fit(recorder.Recorder(), train_dataloaders=ld, ckpt_path=ckpt_path)
        else:
            with pytest.raises(_Preempted):
                trainer.fit(recorder.Recorder(), train_dataloaders=ld)
    return record.seen, trainer


def test_lightning_checkpoint_resumes_mid_epoch_with_another_batch_size(colour_dataset, recorder, tmp_path):
    """Lightning keeps the loader's state_dict() in its checkpoints by itself (the fit loop saves the
    state of every train loader with state_dict/load_state_dict) and loads it on `fit(ckpt_path=)`:
    stopped after 3 batches of 4, resumed with batches of 2, every sample of the epoch exactly once."""
    checkpoint = tmp_path / "mid.ckpt"
    first, _ = _preempted_run(colour_dataset, recorder, checkpoint, 4, stop_after=3)
    second, trainer = _preempted_run(colour_dataset, recorder, checkpoint, 2, ckpt_path=checkpoint)
    assert len(first[0]) == 12 and len(second[0]) == 20
    assert sorted(first[0] + second[0]) == list(range(32)), "epoch 0 over both runs"
    assert sorted(second[1]) == list(range(32)), "epoch 1 whole"
    assert trainer.current_epoch == 2


def test_lightning_resume_with_a_larger_global_batch_warns_and_loses_nothing(colour_dataset, recorder, tmp_path):
    """Lightning fixes the epoch's length before it loads the loader's state, and counts on from its
    own batches: with a larger batch the resumed epoch holds more batches than it will ask for. The
    loader says so, and the rest of the epoch comes at Lightning's next pass: nothing lost or repeated."""
    checkpoint = tmp_path / "mid.ckpt"
    first, _ = _preempted_run(colour_dataset, recorder, checkpoint, 4, stop_after=3)
    with pytest.warns(UserWarning, match="holds 6 batches"):
        second, _ = _preempted_run(colour_dataset, recorder, checkpoint, 8, ckpt_path=checkpoint)
    assert sorted(first[0] + second[0] + second[1]) == list(range(32))
