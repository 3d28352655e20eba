"""Worker crashes surface in the caller; Ctrl-C, exit and close leave no processes or /dev/shm."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time

import psutil
import pytest

import iofeed
from helpers.images import make_colour_tree
from helpers.runs import shm_entries
from iofeed.errors import WorkerError


@pytest.fixture
def big_tree(tmp_path):
    return make_colour_tree(tmp_path / "t", per_class=40)


def test_killed_worker_raises_within_seconds(big_tree):
    with iofeed.loader(big_tree, batch_size=4, workers=2, prefetch=2) as ld:
        stream = iter(ld)
        next(stream)
        victim = ld.backend.processes()[0]
        os.kill(victim.pid, signal.SIGKILL)
        started = time.monotonic()
        with pytest.raises(WorkerError, match="SIGKILL"):
            for _ in stream:
                pass
        assert time.monotonic() - started < 10


_SCRIPT = """
import os, sys, time, iofeed
ld = iofeed.loader(sys.argv[1], batch_size=4, workers=2, prefetch=2)
for k, _ in enumerate(ld):
    if k == 0:
        print("workers", *[p.pid for p in ld.backend.processes()], flush=True)
    if sys.argv[2] == "exit" and k == 2:
        sys.exit(0)
    time.sleep(0.05)
"""


def _run_script(tree, mode: str, interrupt: signal.Signals | None) -> tuple[list[int], int]:
    proc = subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(_SCRIPT), str(tree), mode],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    workers: list[int] = []
    for line in proc.stdout:
        if line.startswith("workers"):
            workers = [int(p) for p in line.split()[1:]]
            break
    if interrupt is not None:
        time.sleep(0.3)
        proc.send_signal(interrupt)
    proc.wait(timeout=30)
    return workers, proc.returncode


def _gone(pids: list[int], seconds: float = 5.0) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if not any(psutil.pid_exists(p) and psutil.Process(p).status() != psutil.STATUS_ZOMBIE for p in pids):
            return True
        time.sleep(0.1)
    return False


@pytest.mark.parametrize("mode, interrupt", [("exit", None), ("loop", signal.SIGINT), ("loop", signal.SIGKILL)])
def test_exit_ctrl_c_and_kill_leave_nothing_behind(big_tree, mode, interrupt):
    before = shm_entries()
    workers, code = _run_script(big_tree, mode, interrupt)
    assert len(workers) == 2
    assert (code == 0) if mode == "exit" else (code != 0), "Ctrl-C and kill stop the program, exit is clean"
    assert _gone(workers), "worker processes outlived the program"
    assert shm_entries() - before == set()


def test_garbage_collected_loader_cleans_up(big_tree):
    import gc

    before = shm_entries()
    ld = iofeed.loader(big_tree, batch_size=4, workers=2)
    next(iter(ld))
    procs = list(ld.backend.processes())
    del ld
    gc.collect()
    assert _gone([p.pid for p in procs])
    assert shm_entries() - before == set()
