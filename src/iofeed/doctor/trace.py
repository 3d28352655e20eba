"""Running a training command as a child process while sampling, about 10 times a second, each
GPU's utilisation and memory (NVML), each usable core's CPU utilisation and the child tree's memory."""
from __future__ import annotations

import os
import subprocess
import time
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..errors import OptionError, require

TREE_REFRESH = 10  # samples between two listings of the child's process tree


@dataclass
class Trace:
    """Utilisation over time: column j of every array is the sample taken at `t[j]`."""

    t: np.ndarray  # (n,) seconds since the command started
    gpu_util: np.ndarray  # (gpus, n) % of the last NVML period a kernel ran
    gpu_mem: np.ndarray  # (gpus, n) bytes used on the device (by every process)
    gpu_mem_total: np.ndarray  # (gpus,) bytes
    cpu: np.ndarray  # (cores, n) % busy, iowait excluded, for the cores this process may run on
    iowait: np.ndarray  # (n,) mean % of those cores' time waiting for I/O
    rss: np.ndarray  # (n,) bytes resident in the command's process tree

    @property
    def gpus(self) -> int:
        return self.gpu_util.shape[0]

    @property
    def cores(self) -> int:
        return self.cpu.shape[0]

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready lists."""
        return {name: getattr(self, name).tolist() for name in self.__dataclass_fields__}

    @classmethod
    def from_dict(cls, raw: dict[str, Any]) -> Trace:
        """The inverse of `to_dict` (arrays with no GPU, core or sample keep their 2-D shape)."""
        n = len(raw["t"])
        arrays = {name: np.asarray(raw[name], dtype=np.float64) for name in cls.__dataclass_fields__}
        for name in ("gpu_util", "gpu_mem", "cpu"):
            arrays[name] = arrays[name].reshape(len(raw[name]), n)
        return cls(**arrays)


@dataclass
class Recording:
    """A finished (or interrupted) run of the command and its trace."""

    command: list[str]
    exit_code: int
    seconds: float
    interrupted: bool
    trace: Trace


class _Nvml:
    """Every GPU's utilisation and used memory; no GPUs when NVML or a device is missing."""

    def __init__(self) -> None:
        self._nvml, self.handles, self.total = None, [], []
        try:
            import pynvml

            pynvml.nvmlInit()
        except Exception:  # noqa: BLE001 - no library, no driver or no device all mean "no GPU"
            return
        try:
            handles = [pynvml.nvmlDeviceGetHandleByIndex(i) for i in range(pynvml.nvmlDeviceGetCount())]
            total = [int(pynvml.nvmlDeviceGetMemoryInfo(h).total) for h in handles]
            for handle in handles:
                pynvml.nvmlDeviceGetUtilizationRates(handle)  # "Not Supported" on MIG instances
        except pynvml.NVMLError:  # GPUs NVML cannot read are traced as none
            pynvml.nvmlShutdown()
            return
        self._nvml, self.handles, self.total = pynvml, handles, total

    def read(self) -> tuple[list[float], list[float]]:
        util = [float(self._nvml.nvmlDeviceGetUtilizationRates(h).gpu) for h in self.handles]
        mem = [float(self._nvml.nvmlDeviceGetMemoryInfo(h).used) for h in self.handles]
        return util, mem

    def close(self) -> None:
        if self._nvml is not None:
            self._nvml.nvmlShutdown()


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
    nvml = _Nvml()
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
            tree: list[Any] = []
            due = start + interval
            while True:
                try:
                    child.wait(timeout=max(0.0, due - time.perf_counter()))
                    break
                except subprocess.TimeoutExpired:
                    pass
                if len(rows) % TREE_REFRESH == 0:
                    tree = _tree(psutil, child.pid)
                rows.append((time.perf_counter() - start, *nvml.read(), *_cpu(psutil, cores), _rss(psutil, tree)))
                # a sampler that fell behind skips ahead rather than taking samples back to back
                due = max(due + interval, time.perf_counter() + interval / 2)
        except KeyboardInterrupt:
            interrupted = True
            _stop(child)
        seconds = time.perf_counter() - start
    finally:
        nvml.close()
    return Recording(list(command), child.returncode, seconds, interrupted, _trace(rows, nvml.total))


def _stop(child: subprocess.Popen) -> None:
    """After Ctrl-C (which the command got too): wait 10 s for it to stop, then terminate it, then kill it."""
    for stop in (child.terminate, child.kill):
        try:
            child.wait(timeout=10.0)
            return
        except subprocess.TimeoutExpired:
            stop()
    child.wait()


def _tree(psutil: Any, pid: int) -> list[Any]:
    """The command's process and all its descendants still alive."""
    try:
        root = psutil.Process(pid)
        return [root, *root.children(recursive=True)]
    except psutil.Error:
        return []


def _cpu(psutil: Any, usable: list[int]) -> tuple[list[float], float]:
    """Busy % per usable core (idle and iowait excluded) and their mean iowait %."""
    every = psutil.cpu_times_percent(percpu=True)
    cores = [every[i] for i in usable if i < len(every)]
    busy = [max(0.0, 100.0 - c.idle - getattr(c, "iowait", 0.0)) for c in cores]
    return busy, float(np.mean([getattr(c, "iowait", 0.0) for c in cores]))


def _rss(psutil: Any, tree: list[Any]) -> float:
    total = 0
    for process in tree:
        try:
            total += process.memory_info().rss
        except psutil.Error:
            continue
    return float(total)


def _trace(rows: list[tuple[Any, ...]], mem_total: list[int]) -> Trace:
    """Rows of samples into a Trace."""
    gpus, n = len(mem_total), len(rows)
    t, util, mem, cpu, iowait, rss = zip(*rows) if rows else ((), (), (), (), (), ())
    cores = len(cpu[0]) if rows else 0
    return Trace(t=np.asarray(t, float), gpu_util=np.asarray(util, float).reshape(n, gpus).T,
                 gpu_mem=np.asarray(mem, float).reshape(n, gpus).T, gpu_mem_total=np.asarray(mem_total, float),
                 cpu=np.asarray(cpu, float).reshape(n, cores).T, iowait=np.asarray(iowait, float),
                 rss=np.asarray(rss, float))
