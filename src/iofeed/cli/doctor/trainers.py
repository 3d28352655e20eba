"""Which processes of the traced command train (rather than load data), without NVML's PIDs.

NVML lists the processes with a CUDA context by host-namespace PID: inside a container they
match none of the command's processes, and torchrun's ranks would be booked as loader workers.
So a process also counts as training when it maps the CUDA driver (`libcuda.so`) while its
parent does not (forked DataLoader workers inherit their trainer's mappings), or when it is a
rank a launcher started: its parent runs torchrun, or it has `LOCAL_RANK` in its environment
and its parent does not (workers inherit their rank's environment).
"""
from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path

LAUNCHERS = ("torchrun", "torch.distributed.run", "torch.distributed.launch")
Reader = Callable[[int, str], bytes | None]  # (pid, "maps" | "cmdline" | "environ") -> contents, None if unreadable


def read_proc(pid: int, name: str) -> bytes | None:
    """/proc/PID/NAME, None when it cannot be read (gone, or another user's)."""
    try:
        return Path(f"/proc/{pid}/{name}").read_bytes()
    except OSError:
        return None


def _maps_libcuda(pid: int, read: Reader) -> bool | None:
    maps = read(pid, "maps")
    return None if maps is None else b"libcuda.so" in maps


def _is_launcher(pid: int, read: Reader) -> bool:
    cmdline = read(pid, "cmdline") or b""
    return any(Path(part.decode(errors="replace")).name in LAUNCHERS for part in cmdline.split(b"\0") if part)


def _has_local_rank(pid: int, read: Reader) -> bool | None:
    environ = read(pid, "environ")
    return None if environ is None else any(v.startswith(b"LOCAL_RANK=") for v in environ.split(b"\0"))


def recognise_trainers(parents: Mapping[int, int | None], read: Reader = read_proc) -> dict[int, str]:
    """{pid: why it trains} for the processes of `parents` (pid -> parent pid) that train."""
    out: dict[int, str] = {}
    for pid, parent in parents.items():
        if parent is None:
            continue
        if _maps_libcuda(pid, read) and not _maps_libcuda(parent, read):
            out[pid] = "maps libcuda"
        elif _is_launcher(parent, read):
            out[pid] = "started by torchrun"
        elif _has_local_rank(pid, read) and _has_local_rank(parent, read) is False:
            out[pid] = "has LOCAL_RANK, its parent not"
    return out
