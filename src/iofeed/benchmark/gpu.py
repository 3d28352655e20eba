"""GPU utilisation over time from NVML (nvidia-ml-py), sampled in a background thread and tagged
with the feed being timed at that moment."""
from __future__ import annotations

import threading
import time
from dataclasses import dataclass

from ..errors import IofeedError, require


@dataclass(frozen=True)
class Sample:
    """One NVML reading: seconds since sampling began, utilisation %, timed feed (or None)."""

    t: float
    util: float
    feed: str | None


class GpuSampler:
    """Reads GPU `index` utilisation every `interval` seconds until `close()`.

    NVML's utilisation is the share of its last sample period (1/6 s to 1 s, by GPU) during
    which a kernel ran, so means over windows of several seconds are what it is good for.
    """

    def __init__(self, index: int = 0, interval: float = 0.1) -> None:
        self._nvml = require("pynvml", "bench")
        try:
            self._nvml.nvmlInit()
        except self._nvml.NVMLError as exc:
            raise IofeedError(f"NVML cannot start ({exc})") from None
        try:
            self._handle = self._nvml.nvmlDeviceGetHandleByIndex(index)
            self._nvml.nvmlDeviceGetUtilizationRates(self._handle)  # "Not Supported" on MIG instances
        except self._nvml.NVMLError as exc:
            self._nvml.nvmlShutdown()
            raise IofeedError(f"NVML cannot read GPU {index}'s utilisation ({exc})") from None
        self._interval = interval
        self.label: str | None = None  # the feed being timed; set by the measuring loop
        self.samples: list[Sample] = []
        self._start = time.perf_counter()
        self._stopped = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="iofeed-bench-nvml", daemon=True)
        self._thread.start()

    def _loop(self) -> None:
        while not self._stopped.wait(self._interval):
            util = self._nvml.nvmlDeviceGetUtilizationRates(self._handle).gpu
            self.samples.append(Sample(time.perf_counter() - self._start, float(util), self.label))

    def mean(self, feed: str) -> float | None:
        """Mean utilisation (%) over the samples taken while `feed` was timed."""
        values = [s.util for s in self.samples if s.feed == feed]
        return sum(values) / len(values) if values else None

    def close(self) -> None:
        """Stop sampling and release NVML."""
        self._stopped.set()
        self._thread.join()
        self._nvml.nvmlShutdown()
