"""Training processes told from loader workers without NVML's PIDs (containers, torchrun): fake /proc."""
from __future__ import annotations

from iofeed.cli.doctor.trace import _Tree
from iofeed.cli.doctor.trainers import read_proc, recognise_trainers

LIBCUDA = b"7f00-7f10 r-xp 00000000 08:01 42 /usr/lib/x86_64-linux-gnu/libcuda.so.580.65\n"
TORCH = b"7e00-7e10 r-xp 00000000 08:01 41 /venv/lib/python3.12/site-packages/torch/lib/libtorch_cpu.so\n"


def proc(files: dict[int, dict[str, bytes]]):
    """A /proc reader over `files` (pid -> name -> contents); what is not there is unreadable."""
    return lambda pid, name: files.get(pid, {}).get(name)


def test_torchrun_ranks_are_trainers_and_their_workers_are_not():
    # 100 torchrun launcher -> 101, 102 ranks (CUDA) -> 201 forked DataLoader worker of rank 101
    files = {
        100: {"cmdline": b"/venv/bin/python\0/venv/bin/torchrun\0--nproc-per-node=2\0train.py\0", "maps": TORCH},
        101: {"cmdline": b"/venv/bin/python\0-u\0train.py\0", "maps": TORCH + LIBCUDA, "environ": b"LOCAL_RANK=0\0"},
        102: {"cmdline": b"/venv/bin/python\0-u\0train.py\0", "maps": TORCH, "environ": b"LOCAL_RANK=1\0"},
        201: {"cmdline": b"/venv/bin/python\0-u\0train.py\0", "maps": TORCH + LIBCUDA, "environ": b"LOCAL_RANK=0\0"},
    }
    found = recognise_trainers({100: 1, 101: 100, 102: 100, 201: 101}, proc(files))
    assert found == {101: "maps libcuda", 102: "started by torchrun"}


def test_python_m_torch_distributed_run_is_a_launcher():
    files = {100: {"cmdline": b"python\0-m\0torch.distributed.run\0train.py\0"}, 101: {}}
    assert recognise_trainers({100: 1, 101: 100}, proc(files)) == {101: "started by torchrun"}


def test_a_rank_is_told_by_local_rank_when_its_launcher_is_unreadable():
    files = {101: {"environ": b"PATH=/bin\0LOCAL_RANK=3\0"}, 100: {"environ": b"PATH=/bin\0"},
             201: {"environ": b"LOCAL_RANK=3\0"}}
    assert recognise_trainers({100: 1, 101: 100, 201: 101}, proc(files)) == {101: "has LOCAL_RANK, its parent not"}


def test_loader_workers_of_a_plain_script_stay_loaders():
    files = {10: {"maps": TORCH + LIBCUDA}, 11: {"maps": TORCH + LIBCUDA}, 12: {"maps": TORCH}}
    assert recognise_trainers({10: 1, 11: 10, 12: 10}, proc(files)) == {10: "maps libcuda"}


def test_this_process_is_read_from_the_real_proc():
    import os

    assert b"python" in (read_proc(os.getpid(), "cmdline") or b"").lower()
    assert read_proc(2**22 + 7, "maps") is None


class _FakeProcess:
    def __init__(self, pid: int, ppid: int, children=()) -> None:
        self.pid, self._ppid, self._children = pid, ppid, list(children)

    def ppid(self) -> int:
        return self._ppid

    def children(self, recursive: bool = False):
        return self._children


def test_the_tree_books_ranks_as_trainers_and_says_nvml_pids_did_not_match():
    """Inside a container NVML lists host PIDs (90001, 90002): the ranks are found by torchrun instead."""
    import psutil

    ranks = [_FakeProcess(101, 100), _FakeProcess(102, 100)]
    worker = _FakeProcess(201, 101)
    root = _FakeProcess(100, 1, ranks + [worker])
    fake_psutil = type("P", (), {"Process": staticmethod(lambda pid: root), "Error": psutil.Error})
    files = {100: {"cmdline": b"torchrun\0train.py\0"}, 101: {}, 102: {}, 201: {}}
    tree = _Tree(fake_psutil, 100)
    tree.refresh({90001, 90002}, proc(files))
    assert tree._trainers == {100, 101, 102}
    (note,) = tree.notes()
    assert "matched none" in note and "101 (started by torchrun)" in note and "201" not in note
    tree = _Tree(fake_psutil, 100)
    tree.refresh({101, 102}, proc(files))  # NVML's PIDs are ours: nothing to say
    assert tree._trainers == {100, 101, 102} and tree.notes() == []
