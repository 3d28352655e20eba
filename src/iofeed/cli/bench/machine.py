"""What the benchmark ran on: CPU, cores, memory, GPU and driver, library versions."""
from __future__ import annotations

import os
import platform
from typing import Any

import psutil

from ...runtime.gpu.nvml import gpu_info
from ...runtime.system import cpu_model, versions


def describe_machine(with_gpu: bool, notes: list[str]) -> dict[str, Any]:
    """The machine record of the results file; what NVML failed to read is null, and said in `notes`."""
    gpu = gpu_info() if with_gpu else None
    if gpu is not None and "errors" in gpu:
        notes.append("NVML could not read the GPU's " + "; ".join(gpu.pop("errors")))
    return {
        "cpu_model": cpu_model(),
        "cores": os.cpu_count() or 1,
        "ram_bytes": int(psutil.virtual_memory().total),
        "os": f"{platform.system()} {platform.release()}",
        "gpu": gpu,
        "versions": versions(),
    }
