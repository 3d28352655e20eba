"""What this machine offers a training job: CPU, cores, library versions, GPUs (NVML), DALI.

One place for the probes that the loader, `bench` and `doctor` each need.
"""
from __future__ import annotations

import importlib
import importlib.metadata
import importlib.util
import platform
from pathlib import Path
from typing import Any

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


def gpu_info(index: int = 0) -> dict[str, Any] | None:
    """Name, driver and memory of GPU `index` from NVML; None when there is no NVML or GPU."""
    try:
        import pynvml
    except ImportError:
        return None
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError:
        return None
    try:
        if pynvml.nvmlDeviceGetCount() <= index:
            return None
        handle = pynvml.nvmlDeviceGetHandleByIndex(index)
        return {
            "name": _text(pynvml.nvmlDeviceGetName(handle)),
            "driver": _text(pynvml.nvmlSystemGetDriverVersion()),
            "memory_bytes": int(pynvml.nvmlDeviceGetMemoryInfo(handle).total),
        }
    finally:
        pynvml.nvmlShutdown()


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value


def cgroup_cpu_quota() -> float | None:
    """The container's CPU limit in cores (cgroup v2 `cpu.max`, else v1), None when unlimited."""
    try:
        quota, period = Path("/sys/fs/cgroup/cpu.max").read_text().split()[:2]
    except (OSError, ValueError):
        try:
            quota = Path("/sys/fs/cgroup/cpu/cpu.cfs_quota_us").read_text().strip()
            period = Path("/sys/fs/cgroup/cpu/cpu.cfs_period_us").read_text().strip()
        except OSError:
            return None
    if quota in ("max", "-1"):
        return None
    return int(quota) / int(period)


def dali_import_status() -> str:
    """"ok" when `nvidia.dali` imports, else the reason."""
    try:
        importlib.import_module("nvidia.dali")
    except Exception as exc:  # noqa: BLE001 - a broken DALI raises all sorts of errors
        return f"{type(exc).__name__}: {exc}".splitlines()[0]
    return "ok"


def gpu_present() -> bool:
    """Whether a CUDA GPU is visible: NVML when nvidia-ml-py is installed, else torch."""
    try:
        import pynvml

        pynvml.nvmlInit()
        try:
            return pynvml.nvmlDeviceGetCount() > 0
        finally:
            pynvml.nvmlShutdown()
    except Exception:  # noqa: BLE001 - not installed, no driver: ask torch
        pass
    try:
        if importlib.util.find_spec("torch") is None:
            return False
        import torch

        return bool(torch.cuda.is_available())
    except Exception:  # noqa: BLE001
        return False
