"""What the benchmark ran on: CPU, cores, memory, GPU and driver, library versions."""
from __future__ import annotations

import importlib.metadata
import os
import platform
from pathlib import Path
from typing import Any

import psutil

from .gpu import gpu_info

_PACKAGES = {"torch": "torch", "torchvision": "torchvision", "pillow": "pillow", "numpy": "numpy",
             "dali": "nvidia-dali-cuda120", "iofeed": "iofeed"}


def cpu_model() -> str:
    """The CPU's model name from /proc/cpuinfo (or what the platform module knows)."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def versions() -> dict[str, str | None]:
    """Versions of Python, the libraries the feeds use, and Pillow's libjpeg-turbo (None: absent)."""
    out: dict[str, str | None] = {"python": platform.python_version()}
    for key, dist in _PACKAGES.items():
        try:
            out[key] = importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            out[key] = None
    if out["dali"] is None:
        out["dali"] = _dali_version()
    from PIL import features

    out["libjpeg_turbo"] = features.version("libjpeg_turbo") if features.check_feature("libjpeg_turbo") else None
    return out


def _dali_version() -> str | None:
    """DALI installed under another distribution name (another CUDA flavour)."""
    for dist in importlib.metadata.distributions():
        if (dist.metadata["Name"] or "").startswith("nvidia-dali"):
            return dist.version
    return None


def describe_machine(with_gpu: bool) -> dict[str, Any]:
    """The machine record of the results file."""
    return {
        "cpu_model": cpu_model(),
        "cores": os.cpu_count() or 1,
        "ram_bytes": int(psutil.virtual_memory().total),
        "os": f"{platform.system()} {platform.release()}",
        "gpu": gpu_info() if with_gpu else None,
        "versions": versions(),
    }
