"""The preprocess pool: results in order, and a dying worker fails its file or the run, never hangs."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import psutil
import pytest

from helpers.images import jpeg_bytes, smooth_rgb
from iofeed.errors import WorkerError
from iofeed.prepare.pool import ordered_map
from iofeed.prepare.verify import verify_dataset

WAIT_S = 180  # a hang guard: only a hang (or a machine loaded beyond reason) takes this long


def _square_or_die(item: int) -> int:
    """Kills its own process for negative items, as the OOM killer would."""
    if item < 0:
        os.kill(os.getpid(), signal.SIGKILL)
    return item * item


def _raise_on_seven(item: int) -> int:
    if item == 7:
        raise ZeroDivisionError("seven")
    return item


def _died(item: int, reason: str) -> str:
    return reason


def _run(func, items, **options) -> list:
    return list(ordered_map(func, items, workers=2, chunksize=4, died=_died, **options))


def test_results_come_in_order():
    assert _run(_square_or_die, list(range(50))) == [i * i for i in range(50)]


def test_a_file_that_kills_its_worker_is_rejected_and_its_chunk_mates_are_kept():
    items = [1, 2, -1, 3, 4, 5, -2, 6, 7]
    results = _run(_square_or_die, items)
    for item, result in zip(items, results):
        if item < 0:
            assert result == "worker died (signal SIGKILL) while preparing this file: out of memory?"
        else:
            assert result == item * item


def test_workers_that_keep_dying_fail_the_run():
    started = time.monotonic()
    with pytest.raises(WorkerError, match="keep dying"):
        _run(_square_or_die, [-1] * 40)
    assert time.monotonic() - started < WAIT_S


def test_an_exception_in_a_worker_surfaces_in_the_caller():
    with pytest.raises(WorkerError, match="on 7: ZeroDivisionError: seven"):
        _run(_raise_on_seven, list(range(20)))


def test_preprocess_survives_a_worker_killed_from_outside(tmp_path):
    """kill -9 of a pool worker mid-run (as the OOM killer does): the run finishes, every file
    is written (the dead worker's chunk is retried), and nothing waits forever."""
    src = tmp_path / "src"
    for i in range(40):
        folder = src / f"{i % 2:03d}.c{i % 2}"
        folder.mkdir(parents=True, exist_ok=True)
        (folder / f"{i:03d}.jpg").write_bytes(jpeg_bytes(smooth_rgb(1200, 900, seed=i)))
    out = tmp_path / "o.iof"
    proc = subprocess.Popen([sys.executable, "-m", "iofeed.cli.main", "preprocess", str(src), "-o", str(out),
                             "--workers", "2"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)
    try:
        victim = _a_pool_worker(proc.pid)
        victim.kill()
        stdout, stderr = proc.communicate(timeout=WAIT_S)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.communicate()
    assert proc.returncode == 0, stderr
    assert "written       train 36, val 4" in stdout and not verify_dataset(out).problems


def _a_pool_worker(pid: int) -> psutil.Process:
    """A worker of the preprocess pool of process `pid` (a child of its fork server), once busy."""
    deadline = time.monotonic() + WAIT_S
    while time.monotonic() < deadline:
        for child in psutil.Process(pid).children(recursive=True):
            try:
                parent = child.parent()
                if parent is not None and parent.pid != pid and child.cpu_times().user > 0.05:
                    return child
            except psutil.NoSuchProcess:
                continue
        time.sleep(0.01)
    raise AssertionError("no busy pool worker appeared")
