"""GPU utilisation over time from NVML (nvidia-ml-py), sampled in a background thread and tagged
with the feed being timed at that moment."""
from __future__ import annotations

import threading
import time
from dataclasses import dataclass

from ...errors import IofeedError, require
from ...runtime.gpu.nvml import Nvml, cuda_nvml_handle


@dataclass(frozen=True)
class Sample:
    """One NVML reading: seconds since sampling began, utilisation %, timed feed (or None)."""

    t: float
    util: float
    feed: str | None


class GpuSampler:
    """Reads CUDA device `index`'s utilisation every `interval` seconds until `close()` (NVML's
    handle for it found through CUDA_VISIBLE_DEVICES: NVML numbers every GPU of the machine).

    NVML's utilisation is the share of its last sample period (1/6 s to 1 s, by GPU) during
    which a kernel ran, so means over windows of several seconds are what it is good for.
    """

    def __init__(self, index: int = 0, interval: float = 0.1) -> None:
        require("pynvml", "bench")
        self._nvml = Nvml()
        if not self._nvml.ok:
            raise IofeedError(f"NVML cannot start ({self._nvml.error})")
        nvml = self._nvml.module
        try:
            self._handle = cuda_nvml_handle(nvml, index)
            if self._handle is None:
                raise IofeedError(f"CUDA device {index} is not among the GPUs NVML lists "
                                  "(check CUDA_VISIBLE_DEVICES)")
            nvml.nvmlDeviceGetUtilizationRates(self._handle)  # "Not Supported" on MIG instances
        except nvml.NVMLError as exc:
            self._nvml.close()
            raise IofeedError(f"NVML cannot read CUDA device {index}'s utilisation ({exc})") from None
        except IofeedError:
            self._nvml.close()
            raise
        self._interval = interval
        self.label: str | None = None  # the feed being timed; set by the measuring loop
        self.samples: list[Sample] = []
        self._start = time.perf_counter()
        self._stopped = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="iofeed-bench-nvml", daemon=True)
        self._thread.start()

    def _loop(self) -> None:
        while not self._stopped.wait(self._interval):
            util = self._nvml.utilisation(self._handle)
            if util == util:  # a failed read is missing (counted in notes), never the end of sampling
                self.samples.append(Sample(time.perf_counter() - self._start, util, self.label))

    def notes(self) -> list[str]:
        """One line per kind of failed read (those samples are missing from the timeline)."""
        return self._nvml.notes("utilisation read(s), left out of the GPU timeline")

    def mean(self, feed: str) -> float | None:
        """Mean utilisation (%) over the samples taken while `feed` was timed."""
        values = [s.util for s in self.samples if s.feed == feed]
        return sum(values) / len(values) if values else None

    def close(self) -> None:
        """Stop sampling and release NVML."""
        self._stopped.set()
        self._thread.join()
        self._nvml.close()
