"""Numbers from a trace: the window in which the GPUs were at work, and a JSON-ready summary."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from .trace import Trace

ACTIVE_UTIL = 5.0  # % utilisation from which a GPU counts as in use at a sample
WORKING_LOADER = 5.0  # % of one core, on average while alive, from which a loader process counts as working
                      # (below: idle helpers such as multiprocessing's forkserver and resource tracker)
LOADER_MIN_SECONDS = 1.0  # a loader process alive for less of the window is not judged
MAX_LAG_S = 0.5  # GPU readings trail CPU ones by up to NVML's sample period (1/6 s to 1 s)


@dataclass(frozen=True)
class Window:
    """The samples from the first to the last one with a GPU in use (all samples without GPUs)."""

    t: np.ndarray  # (n,)
    gpu_util: np.ndarray  # (gpus, n)
    gpu_mem: np.ndarray  # (gpus, n)
    gpu_mem_total: np.ndarray  # (gpus,)
    cpu: np.ndarray  # (cores, n)
    iowait: np.ndarray  # (n,)
    trainer_cpu: np.ndarray  # (n,) % of one core
    loader_cpu: np.ndarray  # (processes, n) % of one core, NaN where not alive

    @property
    def samples(self) -> int:
        return len(self.t)

    @property
    def seconds(self) -> float:
        return float(self.t[-1] - self.t[0]) if self.samples > 1 else 0.0

    @property
    def step(self) -> float:
        """Seconds between samples (the median; 0 with fewer than two)."""
        return float(np.median(np.diff(self.t))) if self.samples > 1 else 0.0

    @property
    def gpu(self) -> np.ndarray:
        """(n,) utilisation averaged over the GPUs in use."""
        means: np.ndarray = self.gpu_util[self.used].mean(axis=0)
        return means

    @property
    def cpu_busy(self) -> np.ndarray:
        """(n,) busy % averaged over the usable cores."""
        return self.cpu.mean(axis=0) if len(self.cpu) else np.zeros(self.samples)

    @property
    def used(self) -> np.ndarray:
        """Indices of the GPUs that reached ACTIVE_UTIL at least once."""
        return np.flatnonzero(self.gpu_util.max(axis=1, initial=0.0) >= ACTIVE_UTIL)

    @property
    def mem_peak_share(self) -> float:
        """The largest peak used / total memory over the GPUs in use."""
        peak = self.gpu_mem[self.used].max(axis=1) / self.gpu_mem_total[self.used]
        return float(peak.max())

    def _working_loaders(self) -> tuple[np.ndarray, np.ndarray]:
        """(alive[process, sample], mean % of one core while alive) of the loader processes that
        worked: >= WORKING_LOADER on average over their own lifetime, alive for at least
        LOADER_MIN_SECONDS of the window. DataLoader workers replaced every epoch each count
        over the epoch they lived; idle helpers (forkserver, resource tracker) drop out."""
        alive = ~np.isnan(self.loader_cpu)
        lived = alive.sum(axis=1)
        means = np.where(alive, self.loader_cpu, 0.0).sum(axis=1) / np.maximum(lived, 1)
        working = (lived * self.step >= LOADER_MIN_SECONDS) & (means >= WORKING_LOADER)
        return alive[working], means[working]

    @property
    def loader_busy(self) -> float | None:
        """Mean % of one core per working loader process while alive (None when none worked)."""
        _, means = self._working_loaders()
        return float(means.mean()) if len(means) else None

    @property
    def loaders_at_once(self) -> float:
        """Working loader processes alive at once, averaged over the samples with any alive."""
        alive, _ = self._working_loaders()
        counts = alive.sum(axis=0)
        return float(counts[counts > 0].mean()) if counts.any() else 0.0


def active_window(trace: Trace) -> Window | None:
    """The part of `trace` in which the GPUs worked, less samples with a GPU reading missing;
    None when GPUs are present but never used."""
    if trace.gpus == 0:
        keep = np.ones(len(trace.t), bool)
    else:
        busy = np.flatnonzero(trace.gpu_util.max(axis=0) >= ACTIVE_UTIL)
        if not len(busy):
            return None
        keep = np.zeros(len(trace.t), bool)
        keep[busy[0]:busy[-1] + 1] = True
        keep &= ~np.isnan(trace.gpu_util).any(axis=0) & ~np.isnan(trace.gpu_mem).any(axis=0)  # missing readings
    return Window(trace.t[keep], trace.gpu_util[:, keep], trace.gpu_mem[:, keep], trace.gpu_mem_total,
                  trace.cpu[:, keep], trace.iowait[keep], trace.trainer_cpu[keep], trace.loader_cpu[:, keep])


def gpu_cpu_correlation(window: Window) -> float | None:
    """The most negative Pearson correlation of GPU utilisation with CPU busy, the GPU series
    shifted later by 0 to MAX_LAG_S; None when a series is constant or too short."""
    gpu, cpu = window.gpu, window.cpu_busy
    step = window.step
    max_lag = int(MAX_LAG_S / step) if step > 0 else 0
    values = []
    for lag in range(max_lag + 1):
        a, b = cpu[: len(cpu) - lag], gpu[lag:]
        if len(a) > 2 and a.std() > 0 and b.std() > 0:
            values.append(float(np.corrcoef(a, b)[0, 1]))
    return min(values) if values else None


def summarize(trace: Trace) -> dict[str, Any]:
    """Duration, per-GPU and CPU figures over the active window, as plain numbers."""
    window = active_window(trace)
    out: dict[str, Any] = {
        "samples": len(trace.t), "seconds": float(trace.t[-1]) if len(trace.t) else 0.0,
        "gpus": trace.gpus, "cores": trace.cores,
        "rss_peak_bytes": float(trace.rss.max(initial=0.0)),
        "active_window": None if window is None or not window.samples else [float(window.t[0]), float(window.t[-1])],
    }
    if window is None or not window.samples:
        return out
    out["gpu"] = [{"index": i, "util_mean": float(u.mean()),
                   **{f"util_p{q}": float(np.percentile(u, q)) for q in (10, 50, 90)},
                   "mem_peak_bytes": float(m.max()), "mem_total_bytes": float(total)}
                  for i, (u, m, total) in enumerate(zip(window.gpu_util, window.gpu_mem, window.gpu_mem_total))]
    busy = window.cpu_busy
    out.update(cpu_busy_mean=float(busy.mean()), cpu_busy_p90=float(np.percentile(busy, 90)),
               cpu_core_mean=[float(c) for c in window.cpu.mean(axis=1)], iowait_mean=float(window.iowait.mean()),
               gpu_cpu_correlation=gpu_cpu_correlation(window) if len(window.used) else None,
               trainer_cpu_mean=float(window.trainer_cpu.mean()), loaders_at_once=window.loaders_at_once,
               loader_cpu_per_process=window.loader_busy)
    return out
