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
from helpers.runs import slot_memory
from iofeed.errors import WorkerError


@pytest.fixture
def big_tree(tmp_path):
    return make_colour_tree(tmp_path / "t", per_class=40)


@pytest.mark.parametrize("workers, dead_before_next_task", [(2, False), (1, True)])
def test_killed_worker_raises_within_seconds(big_tree, workers, dead_before_next_task):
    """A worker killed mid-epoch raises WorkerError naming the signal: found by its sentinel while
    the engine waits, or, dead while the consumer held a batch, when it is sent the next task."""
    with iofeed.loader(big_tree, batch_size=4, workers=workers, resources=iofeed.Resources(prefetch=2)) as ld:
        stream = iter(ld)
        next(stream)
        victim = ld.engine.processes()[0]
        os.kill(victim.pid, signal.SIGKILL)
        if dead_before_next_task:
            assert _gone([victim.pid])
        started = time.monotonic()
        with pytest.raises(WorkerError, match="SIGKILL"):
            for _ in stream:
                pass
        assert time.monotonic() - started < 120  # a hang guard: without detection it waits for ever


_SCRIPT = """
import os, sys, time, iofeed
def mapped(pid):
    with open(f"/proc/{pid}/maps") as maps:
        paths = [line.split(maxsplit=5)[5].strip() for line in maps if len(line.split(maxsplit=5)) == 6]
    return sorted({p.split(" (deleted)")[0] for p in paths if "/dev/shm/" in p or "iofeed-slots" in p})
ld = iofeed.loader(sys.argv[1], batch_size=4, workers=2, resources=iofeed.Resources(prefetch=2))
for k, _ in enumerate(ld):
    if k == 0:
        pids = [p.pid for p in ld.engine.processes()]
        print("mapped", *sorted({m for pid in [os.getpid(), *pids] for m in mapped(pid)}), flush=True)
        print("workers", *pids, flush=True)
    if sys.argv[2] == "exit" and k == 2:
        sys.exit(0)
    time.sleep(0.05)
"""


def _run_script(tree, mode: str, interrupt: signal.Signals | None) -> tuple[list[int], list[str], int]:
    """(worker pids, what the program and its workers mapped of /dev/shm or slot memory, exit code)."""
    proc = subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(_SCRIPT), str(tree), mode],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    workers: list[int] = []
    mapped: list[str] = []
    for line in proc.stdout:
        if line.startswith("mapped"):
            mapped = line.split()[1:]
        if line.startswith("workers"):
            workers = [int(p) for p in line.split()[1:]]
            break
    if interrupt is not None:
        time.sleep(0.3)
        proc.send_signal(interrupt)
    proc.wait(timeout=120)
    return workers, mapped, proc.returncode


def _gone(pids: list[int], seconds: float = 60.0) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if not any(psutil.pid_exists(p) and psutil.Process(p).status() != psutil.STATUS_ZOMBIE for p in pids):
            return True
        time.sleep(0.1)
    return False


@pytest.mark.parametrize("mode, interrupt", [("exit", None), ("loop", signal.SIGINT), ("loop", signal.SIGKILL)])
def test_exit_ctrl_c_and_kill_leave_nothing_behind(big_tree, mode, interrupt):
    """Only what this program mapped is checked: other processes on the machine may use /dev/shm."""
    workers, mapped, code = _run_script(big_tree, mode, interrupt)
    assert len(workers) == 2
    assert (code == 0) if mode == "exit" else (code != 0), "Ctrl-C and kill stop the program, exit is clean"
    assert _gone(workers), "worker processes outlived the program"
    assert any("iofeed-slots" in m for m in mapped), f"slot memory is the memfd block: {mapped}"
    named = [m for m in mapped if m.startswith("/dev/shm/") and not m.startswith("/dev/shm/sem.")]
    assert not [m for m in named if os.path.exists(m)], "a /dev/shm name outlived the program"


def test_garbage_collected_loader_cleans_up(big_tree):
    import gc

    gc.collect()  # what earlier tests left to the collector is not this loader's
    before = slot_memory()
    ld = iofeed.loader(big_tree, batch_size=4, workers=2)
    next(iter(ld))
    procs = list(ld.engine.processes())
    del ld
    gc.collect()
    assert _gone([p.pid for p in procs])
    assert slot_memory() == before


@pytest.mark.slow  # the first decode in this process imports the resize kernels (~4 s)
def test_a_worker_whose_consumer_is_gone_exits_quietly(colour_dataset, capsys):
    """Issue 22.13: a worker finishing a task after its consumer was killed printed a BrokenPipeError
    traceback. Run the worker loop here on a real pipe whose consumer end is closed mid-task."""
    import mmap
    import multiprocessing as mp

    import numpy as np

    from iofeed.augment.batch_key import BatchKey
    from iofeed.engines.workers.slots import SlotLayout
    from iofeed.engines.workers.task import Task, worker_main
    from iofeed.image.boxes import Augment
    from iofeed.sources.samples import open_source

    source = open_source(colour_dataset)
    layout = SlotLayout(2, 4, 32)
    block, stale = mmap.mmap(-1, layout.total_bytes), mmap.mmap(-1, 8)
    consumer, worker = mp.Pipe(duplex=True)
    consumer.send(Task(1, 0, 0, np.arange(4), BatchKey(0, 0, 0, 0), np.arange(4, 12)))
    consumer.close()  # killed while its task was queued
    sigint = signal.getsignal(signal.SIGINT)  # a worker ignores Ctrl-C and runs torch on one thread: this is
    torch = sys.modules.get("torch")          # pytest's process, whose later subprocesses would inherit that
    threads = torch.get_num_threads() if torch is not None else None
    try:
        assert worker_main(block, stale, layout, source, Augment(size=32, train=False), "skip", worker) is None
    finally:
        signal.signal(signal.SIGINT, sigint)
        if threads is not None:
            torch.set_num_threads(threads)
