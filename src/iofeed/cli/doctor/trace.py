"""Running a training command as a child process while sampling, about 10 times a second, each
GPU's utilisation and memory (NVML), each usable core's CPU utilisation, the child tree's memory,
and the CPU of its training processes apart from that of its other processes (loader workers)."""
from __future__ import annotations

import os
import subprocess
import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ...errors import OptionError, require
from ...runtime.gpu.nvml import Nvml
from .trainers import Reader, read_proc, recognise_trainers

TREE_REFRESH = 10  # samples between two listings of the child's process tree


@dataclass
class Trace:
    """Utilisation over time: column j of every array is the sample taken at `t[j]`."""

    t: np.ndarray  # (n,) seconds since the command started
    gpu_util: np.ndarray  # (gpus, n) % of the last NVML period a kernel ran (NaN: NVML failed the reading)
    gpu_mem: np.ndarray  # (gpus, n) bytes used on the device (by every process; NaN: failed)
    gpu_mem_total: np.ndarray  # (gpus,) bytes
    cpu: np.ndarray  # (cores, n) % busy, iowait excluded, for the cores this process may run on
    iowait: np.ndarray  # (n,) mean % of those cores' time waiting for I/O
    rss: np.ndarray  # (n,) bytes resident in the command's process tree
    trainer_cpu: np.ndarray  # (n,) % of one core used by the training processes (the command's own, GPU users)
    loader_cpu: np.ndarray  # (processes, n) % of one core used by each other process of the tree (NaN: not alive)

    @property
    def gpus(self) -> int:
        return int(self.gpu_util.shape[0])

    @property
    def cores(self) -> int:
        return int(self.cpu.shape[0])

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready lists (NaN — a process not alive, a GPU reading NVML failed — as null)."""
        out = {name: getattr(self, name).tolist() for name in self.__dataclass_fields__}
        for name in ("loader_cpu", "gpu_util", "gpu_mem"):
            out[name] = [[None if v != v else v for v in row] for row in out[name]]
        return out

    @classmethod
    def from_dict(cls, raw: dict[str, Any]) -> Trace:
        """The inverse of `to_dict` (arrays with no GPU, core or sample keep their 2-D shape; null is
        NaN; process CPU series missing from traces recorded before they existed read as none)."""
        n = len(raw["t"])
        missing = {"trainer_cpu": np.zeros(n), "loader_cpu": np.zeros((0, n))}
        arrays = {name: np.asarray(raw.get(name, missing.get(name)), dtype=np.float64)
                  for name in cls.__dataclass_fields__}
        for name in ("gpu_util", "gpu_mem", "cpu", "loader_cpu"):
            arrays[name] = arrays[name].reshape(len(raw.get(name, ())), n)
        return cls(**arrays)


@dataclass
class Recording:
    """A finished (or interrupted) run of the command and its trace, and what to know in reading it."""

    command: list[str]
    exit_code: int
    seconds: float
    interrupted: bool
    trace: Trace
    notes: list[str] = field(default_factory=list)  # failed NVML reads; how training processes were told


class _Gpus:
    """Every GPU's utilisation and used memory; no GPUs when NVML or a device is missing."""

    def __init__(self) -> None:
        self._nvml, self.handles, self.total = Nvml(), [], []
        if not self._nvml.ok:
            return
        nvml = self._nvml.module
        try:
            handles = self._nvml.every_handle()
            total = [int(nvml.nvmlDeviceGetMemoryInfo(h).total) for h in handles]
            for handle in handles:
                nvml.nvmlDeviceGetUtilizationRates(handle)  # "Not Supported" on MIG instances
        except nvml.NVMLError:  # GPUs NVML cannot read are traced as none
            self._nvml.close()
            return
        self.handles, self.total = handles, total

    def read(self) -> tuple[list[float], list[float]]:
        """Each GPU's utilisation % and used bytes; a reading NVML fails to give is NaN (missing)."""
        return ([self._nvml.utilisation(h) for h in self.handles], [self._nvml.used_memory(h) for h in self.handles])

    def notes(self) -> list[str]:
        """One line per kind of failed reading."""
        return self._nvml.notes("reading(s), left missing (null) in the trace")

    def gpu_pids(self) -> set[int]:
        """Processes with a CUDA context on any GPU (as NVML numbers them; none if it cannot say)."""
        pids: set[int] = set()
        nvml = self._nvml.module
        for handle in self.handles:
            try:
                pids.update(p.pid for p in nvml.nvmlDeviceGetComputeRunningProcesses(handle))
            except nvml.NVMLError:
                continue
        return pids

    def close(self) -> None:
        self._nvml.close()


def record(command: list[str], interval: float = 0.1) -> Recording:
    """Run `command` (its output goes to this terminal) and sample until it exits.

    Ctrl-C stops the command (it gets the signal too) and keeps the trace recorded so far.
    """
    psutil = require("psutil", "doctor")
    if not command:
        raise OptionError("empty command after `--` (e.g. iofeed doctor -- python train.py)")
    if interval <= 0:
        raise OptionError(f"sampling interval must be > 0 seconds, got {interval}")
    cores = sorted(os.sched_getaffinity(0))
    nvml = _Gpus()
    psutil.cpu_times_percent(percpu=True)  # the first call only starts the counters
    rows: list[tuple[Any, ...]] = []
    interrupted = False
    try:
        start = time.perf_counter()
        try:
            child = subprocess.Popen(command)
        except OSError as exc:
            raise OptionError(f"cannot run {command[0]!r}: {exc.strerror or exc}") from None
        try:
            tree = _Tree(psutil, child.pid)
            due = start + interval
            while True:
                try:
                    child.wait(timeout=max(0.0, due - time.perf_counter()))
                    break
                except subprocess.TimeoutExpired:
                    pass
                if len(rows) % TREE_REFRESH == 0:
                    tree.refresh(nvml.gpu_pids())
                rows.append((time.perf_counter() - start, *nvml.read(), *_cpu(psutil, cores), *tree.sample()))
                # a sampler that fell behind skips ahead rather than taking samples back to back
                due = max(due + interval, time.perf_counter() + interval / 2)
        except KeyboardInterrupt:
            interrupted = True
            _stop(child)
        seconds = time.perf_counter() - start
    finally:
        nvml.close()
    notes = nvml.notes() + tree.notes()
    return Recording(list(command), child.returncode, seconds, interrupted, _trace(rows, nvml.total), notes)


def _stop(child: subprocess.Popen[bytes]) -> None:
    """After Ctrl-C (which the command got too): wait 10 s for it to stop, then terminate it, then kill it."""
    for stop in (child.terminate, child.kill):
        try:
            child.wait(timeout=10.0)
            return
        except subprocess.TimeoutExpired:
            stop()
    child.wait()


class _Tree:
    """The command's process and its descendants: memory, and CPU split into training processes
    (the command's own and any with a CUDA context) and the others (DataLoader or iofeed workers).
    Process objects are kept between listings, so each one's CPU counts from its previous sample."""

    def __init__(self, psutil: Any, pid: int) -> None:
        self._psutil, self._pid = psutil, pid
        self._procs: dict[int, Any] = {}
        self._fresh: set[int] = set()  # listed, not sampled yet: their first CPU reading means nothing
        self._trainers: set[int] = {pid}
        self._unmatched: dict[int, str] = {}  # trainers NVML's PIDs did not show, and why they count

    def refresh(self, gpu_pids: set[int], read: Reader = read_proc) -> None:
        """List the tree again; training processes are those NVML lists (`gpu_pids`), the command's
        own, and those `recognise_trainers` finds (NVML's PIDs are the host's, not a container's)."""
        try:
            root = self._psutil.Process(self._pid)
            alive = [root, *root.children(recursive=True)]
        except self._psutil.Error:
            alive = []
        self._fresh |= {p.pid for p in alive if p.pid not in self._procs}
        self._procs = {p.pid: self._procs.get(p.pid, p) for p in alive}
        matched = gpu_pids & set(self._procs)
        recognised = recognise_trainers({p.pid: _parent(self._psutil, p) for p in alive}, read)
        self._trainers = {self._pid} | matched | set(recognised)
        if gpu_pids and not matched:
            self._unmatched.update({pid: why for pid, why in recognised.items() if pid != self._pid})

    def notes(self) -> list[str]:
        """What to know about how training processes were told apart (empty when NVML's PIDs did it)."""
        if not self._unmatched:
            return []
        how = ", ".join(f"{pid} ({why})" for pid, why in sorted(self._unmatched.items())[:8])
        return ["NVML's GPU process IDs matched none of the command's processes (another PID namespace: a "
                f"container?); training processes were recognised instead as {how}: the split of CPU between "
                "training and loader processes rests on that"]

    def sample(self) -> tuple[float, float, dict[int, float]]:
        """(bytes resident, training processes' CPU %, {other process: its CPU %, NaN on its first sample})."""
        rss = trainer = 0.0
        loaders: dict[int, float] = {}
        for pid, process in list(self._procs.items()):
            try:
                rss += process.memory_info().rss
                busy = process.cpu_percent(None)  # since this object's previous call (0.0 on the first)
            except self._psutil.Error:
                del self._procs[pid]
                continue
            if pid in self._trainers:
                trainer += busy
            else:
                loaders[pid] = float("nan") if pid in self._fresh else busy
        self._fresh.clear()
        return float(rss), trainer, loaders


def _parent(psutil: Any, process: Any) -> int | None:
    """The parent PID of `process` (None when it is gone)."""
    try:
        return int(process.ppid())
    except psutil.Error:
        return None


def _cpu(psutil: Any, usable: list[int]) -> tuple[list[float], float]:
    """Busy % per usable core (idle and iowait excluded) and their mean iowait %."""
    every = psutil.cpu_times_percent(percpu=True)
    cores = [every[i] for i in usable if i < len(every)]
    busy = [max(0.0, 100.0 - c.idle - getattr(c, "iowait", 0.0)) for c in cores]
    return busy, float(np.mean([getattr(c, "iowait", 0.0) for c in cores]))


def _trace(rows: list[tuple[Any, ...]], mem_total: list[int]) -> Trace:
    """Rows of samples into a Trace."""
    gpus, n = len(mem_total), len(rows)
    t, util, mem, cpu, iowait, rss, trainer, loaders = zip(*rows) if rows else ((),) * 8
    cores = len(cpu[0]) if rows else 0
    pids = list(dict.fromkeys(pid for sample in loaders for pid in sample))  # in order of appearance
    loader_cpu = np.array([[sample.get(pid, np.nan) for sample in loaders] for pid in pids], float)
    loader_cpu = loader_cpu.reshape(len(pids), n)
    return Trace(t=np.asarray(t, float), gpu_util=np.asarray(util, float).reshape(n, gpus).T,
                 gpu_mem=np.asarray(mem, float).reshape(n, gpus).T, gpu_mem_total=np.asarray(mem_total, float),
                 cpu=np.asarray(cpu, float).reshape(n, cores).T, iowait=np.asarray(iowait, float),
                 rss=np.asarray(rss, float), trainer_cpu=np.asarray(trainer, float), loader_cpu=loader_cpu)
