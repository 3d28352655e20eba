"""What this machine offers a training job: CPU, cores, memory, library versions.

One place for the probes that the loader, `bench` and `cli/doctor` each need; what only a GPU has
(NVML, CUDA devices and streams, DALI) is in `iofeed.runtime.gpu`.
"""
from __future__ import annotations

import importlib
import importlib.metadata
import importlib.util
import os
import platform
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from ..errors import OptionError

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
    """Versions of Python, the data-loading libraries, and Pillow's libjpeg-turbo (None: absent)."""
    out: dict[str, str | None] = {"python": platform.python_version()}
    for key, dist in _PACKAGES.items():
        try:
            out[key] = importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            out[key] = None
    if out["dali"] is None:
        from .gpu.dali import dali_version

        out["dali"] = dali_version()
    from PIL import features

    out["libjpeg_turbo"] = features.version("libjpeg_turbo") if features.check_feature("libjpeg_turbo") else None
    return out


CGROUP_ROOT = Path("/sys/fs/cgroup")
_UNLIMITED_BYTES = 1 << 60  # cgroup v1 writes "no limit" as a huge page-rounded number


def cgroup_cpu_quota(root: Path = CGROUP_ROOT) -> float | None:
    """The container's CPU limit in cores (cgroup v2 `cpu.max`, else v1), None when unlimited."""
    try:
        quota, period = (root / "cpu.max").read_text().split()[:2]
    except (OSError, ValueError):
        try:
            quota = (root / "cpu" / "cpu.cfs_quota_us").read_text().strip()
            period = (root / "cpu" / "cpu.cfs_period_us").read_text().strip()
        except OSError:
            return None
    if quota in ("max", "-1"):
        return None
    return int(quota) / int(period)


def cgroup_memory_room(root: Path = CGROUP_ROOT) -> int | None:
    """Bytes the container may still use (cgroup v2 `memory.max` - `memory.current`, else v1),
    None when it has no limit."""
    for limit_file, usage_file in (("memory.max", "memory.current"),
                                   ("memory/memory.limit_in_bytes", "memory/memory.usage_in_bytes")):
        try:
            limit = (root / limit_file).read_text().strip()
        except OSError:
            continue
        if limit == "max" or int(limit) >= _UNLIMITED_BYTES:
            return None
        try:
            used = int((root / usage_file).read_text().strip())
        except (OSError, ValueError):
            used = 0
        return max(0, int(limit) - used)
    return None


def available_ram() -> int:
    """Bytes of RAM available to new allocations (`MemAvailable`: free plus reclaimable cache)."""
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")


def local_ranks(environ: Mapping[str, str] = os.environ) -> int:
    """Training processes sharing this node: torchrun's `LOCAL_WORLD_SIZE`, else 1."""
    value = environ.get("LOCAL_WORLD_SIZE", "1")
    try:
        ranks = int(value)
    except ValueError:
        ranks = 0
    if ranks < 1:
        raise OptionError(f"LOCAL_WORLD_SIZE={value!r} is not a positive count of processes on this node: "
                          "unset it or set the number of local ranks")
    return ranks


@dataclass(frozen=True)
class RankAllowance:
    """How much of a machine resource (cores, bytes) one local rank may use, and how that was found."""

    amount: int
    because: str


def usable_cores(root: Path = CGROUP_ROOT, environ: Mapping[str, str] = os.environ) -> RankAllowance:
    """Cores this process may use: CPU affinity ∩ cgroup quota, split among the local ranks, at least 1."""
    affinity = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    quota = cgroup_cpu_quota(root)
    ranks = local_ranks(environ)
    cores = min(affinity, max(1, int(quota))) if quota is not None else affinity
    return RankAllowance(max(1, cores // ranks),
                 f"affinity {affinity}, quota {'none' if quota is None else f'{quota:g}'}, local ranks {ranks}")


def usable_memory(root: Path = CGROUP_ROOT, environ: Mapping[str, str] = os.environ) -> RankAllowance:
    """Bytes this process may allocate: available RAM, capped by the cgroup limit, split among the local ranks."""
    ram = available_ram()
    room = cgroup_memory_room(root)
    ranks = local_ranks(environ)
    found = min(ram, room) if room is not None else ram
    cgroup = "none" if room is None else f"{room:,} bytes left"
    return RankAllowance(found // ranks, f"available RAM {ram:,} bytes, cgroup limit {cgroup}, local ranks {ranks}")
