"""A worker that makes no progress (stopped with SIGSTOP, a read or a transform that hangs) is named
with the sample and what it was doing, then the loader raises, instead of stalling for ever.

No test waits on a time budget: the watchdog's clock is replaced by one that stands still until
the event the test is about (the worker inside a transform that hangs, a SIGSTOP sent), then
moves 0.2 "seconds" per look, against bounds of 0.1 (warn) and 0.5 (raise)."""
from __future__ import annotations

import os
import signal
import warnings

import pytest

import iofeed
from helpers.transforms import WaitFor
from iofeed.engines.workers import watchdog
from iofeed.engines.workers.watchdog import RAISE_ENV, WARN_ENV, Watchdog
from iofeed.engines.workers.worker_status import IDLE, TRANSFORMING, WorkerStatus, finish_task, mark, worker_view
from iofeed.errors import OptionError, WorkerError

SMALL = {"batch_size": 4, "image_size": 32, "workers": 1}


def _clock_from(started) -> object:
    """A clock at 0 until `started()` is true, then 0.2 further at each reading."""
    now = [0.0]

    def clock() -> float:
        if started():
            now[0] += 0.2
        return now[0]

    return clock


@pytest.fixture
def bounds(monkeypatch):
    monkeypatch.setenv(WARN_ENV, "0.1")
    monkeypatch.setenv(RAISE_ENV, "0.5")


def test_a_hung_transform_is_named_then_raises(colour_dataset, tmp_path, monkeypatch, bounds):
    entered = tmp_path / "entered"
    monkeypatch.setattr(watchdog, "monotonic", _clock_from(entered.exists))
    with iofeed.loader(colour_dataset, transform=WaitFor(str(tmp_path / "never"), str(entered)), **SMALL) as ld:
        with pytest.warns(RuntimeWarning, match="no progress") as warned, pytest.raises(WorkerError) as raised:
            next(iter(ld))
        assert not any(p.is_alive() for p in ld.engine.processes()), "closed by the error: no worker left"
        paths = {ld.source.path_of(i) for i in range(len(ld.source))}
    message = str(raised.value)
    assert "\n" not in message and RAISE_ENV in message and "loader worker 0 (pid " in message
    assert message.split("WaitFor on sample ")[1].split(":")[0] in paths
    assert "running transform WaitFor on sample" in str(warned[0].message)


def test_a_slow_transform_is_warned_about_and_goes_on(colour_dataset, tmp_path, monkeypatch, bounds):
    """Past the warning only (no raise bound): once the transform returns, every batch arrives."""
    monkeypatch.setenv(RAISE_ENV, "0")  # never
    entered, gate = tmp_path / "entered", tmp_path / "go"
    monkeypatch.setattr(watchdog, "monotonic", _clock_from(entered.exists))
    seen = []

    def record(message, *args, **kwargs):
        seen.append(str(message))
        gate.touch()  # the watchdog spoke: let the transform go

    with warnings.catch_warnings():
        warnings.simplefilter("always")
        warnings.showwarning = record
        with iofeed.loader(colour_dataset, transform=WaitFor(str(gate), str(entered)), **SMALL) as ld:
            batches = sum(1 for _ in ld)
    assert batches == len(ld) == 8
    assert ld.stats.settings["stall_warn_seconds"] == 0.1 and ld.stats.settings["stall_seconds"] is None
    assert seen and "running transform WaitFor on sample" in seen[0] and "up to inf s" in seen[0]


def test_a_stopped_worker_is_named_then_raises(colour_dataset, monkeypatch, bounds):
    stopped = []
    monkeypatch.setattr(watchdog, "monotonic", _clock_from(lambda: bool(stopped)))
    with iofeed.loader(colour_dataset, resources=iofeed.Resources(prefetch=1), **SMALL) as ld:
        it = iter(ld)
        next(it)
        (proc,) = ld.engine.processes()
        os.kill(proc.pid, signal.SIGSTOP)
        stopped.append(proc.pid)
        try:
            with pytest.warns(RuntimeWarning), pytest.raises(WorkerError, match=rf"worker 0 \(pid {proc.pid}\)"):
                for _ in it:
                    pass
            proc.join(5)  # SIGKILLed by close(), stopped or not
            assert not proc.is_alive()
        finally:
            if proc.is_alive():
                os.kill(proc.pid, signal.SIGCONT)


@pytest.mark.parametrize("value", ["soon", "-1"])
def test_a_bad_bound_is_refused_when_the_loader_is_made(colour_dataset, monkeypatch, value):
    monkeypatch.setenv(RAISE_ENV, value)
    with pytest.raises(OptionError, match=f"{RAISE_ENV}='{value}'"):
        iofeed.loader(colour_dataset, **SMALL)


def test_only_a_worker_with_work_left_is_judged(colour_dataset):
    """A worker is stalled when its marks stand still while a task it was sent is unfinished: not
    while it starts, nor once its tasks are done (their reports wait for a consumer that is busy
    elsewhere, training)."""
    now = [0.0]
    with iofeed.loader(colour_dataset, **SMALL) as ld:
        source = ld.source
    dog = Watchdog(source, "helpers.transforms.jitter", bounds=(10.0, 20.0), clock=lambda: now[0])
    record = WorkerStatus()
    worker = worker_view(record.block.buffer)  # the worker's side of the same 32 bytes
    dog.started(record)
    now[0] = 100.0
    dog.check([(record, 1, "worker 0", 1)])  # never marked: still starting
    mark(worker, -1, IDLE)
    mark(worker, 5, TRANSFORMING)
    dog.check([(record, 1, "worker 0", 1)])  # moved since
    now[0] = 112.0
    with pytest.warns(RuntimeWarning, match=f"transform helpers.transforms.jitter on sample {source.path_of(5)}"):
        dog.check([(record, 1, "worker 0", 1)])
    finish_task(worker)
    now[0] = 500.0
    dog.check([(record, 1, "worker 0", 1)])  # done: its report waits for the consumer
    now[0] = 1000.0
    with pytest.warns(RuntimeWarning), pytest.raises(WorkerError, match="no progress for 500 s with a task it has"):
        dog.check([(record, 1, "worker 0", 2)])  # a second task sent, not begun
    del worker
    record.close()
