"""The machine as a training job sees it: cores, memory, /dev/shm, GPUs and the decoding libraries."""
from __future__ import annotations

import os
import shutil
from dataclasses import dataclass, field
from typing import Any

from ...errors import require
from ...runtime.gpu.dali import dali_import_status
from ...runtime.gpu.nvml import gpu_info
from ...runtime.system import cgroup_cpu_quota, cpu_model, usable_cores, versions
from .finding import Finding

GIB = 2**30
SMALL_SHM = 2 * GIB  # below this, DataLoader workers run out of shared memory for their batches


@dataclass
class Environment:
    """What `check_environment` found."""

    cpu_model: str
    cores: int  # logical cores the OS reports
    usable_cores: int  # cores this rank may use: affinity ∩ quota, split among local ranks (`system.usable_cores`)
    cores_because: str  # what `usable_cores` was found from
    cpu_quota: float | None  # cgroup CPU limit in cores, None when unlimited
    ram_bytes: int
    ram_available_bytes: int
    shm_bytes: int | None  # /dev/shm size, None when absent
    shm_free_bytes: int | None
    gpus: list[dict[str, Any]]  # name, driver, memory_bytes per GPU
    gpu_note: str | None  # why no GPU was found
    versions: dict[str, str | None]  # python, torch, torchvision, pillow, numpy, dali, iofeed, libjpeg_turbo
    dali_import: str  # "ok" or why `import nvidia.dali` failed
    findings: list[Finding] = field(default_factory=list)


def check_environment() -> Environment:
    """Inspect this machine (no GPU is fine: it is reported, not an error)."""
    psutil = require("psutil", "doctor")

    memory = psutil.virtual_memory()
    shm = shutil.disk_usage("/dev/shm") if os.path.isdir("/dev/shm") else None
    gpus, gpu_note = _gpus()
    cores = usable_cores()
    env = Environment(
        cpu_model=cpu_model(), cores=os.cpu_count() or 1, usable_cores=cores.amount, cores_because=cores.because,
        cpu_quota=cgroup_cpu_quota(), ram_bytes=int(memory.total), ram_available_bytes=int(memory.available),
        shm_bytes=shm.total if shm else None, shm_free_bytes=shm.free if shm else None,
        gpus=gpus, gpu_note=gpu_note, versions=versions(), dali_import=dali_import_status(),
    )
    env.findings = _findings(env)
    return env


def _gpus() -> tuple[list[dict[str, Any]], str | None]:
    """Every GPU NVML sees, or an empty list and the reason."""
    try:
        import pynvml  # noqa: F401 - only to tell "not installed" from "no GPU"
    except ImportError:
        return [], "nvidia-ml-py is not installed, so GPUs cannot be queried (pip install 'iofeed[doctor]')"
    gpus: list[dict[str, Any]] = []
    while (info := gpu_info(len(gpus))) is not None:
        gpus.append(info)
    return gpus, None if gpus else "no NVIDIA GPU found (no NVML driver library, or no device)"


def _findings(env: Environment) -> list[Finding]:
    """What in the environment slows a training input pipeline down, with the fix."""
    out = []
    if env.shm_bytes is not None and env.shm_bytes < SMALL_SHM:
        out.append(Finding(
            "small-shm", "/dev/shm is small: DataLoader workers pass every batch through it",
            [f"/dev/shm is {env.shm_bytes / GIB:.2f} GiB ({(env.shm_free_bytes or 0) / GIB:.2f} GiB free)"],
            ["in Docker, start the container with --shm-size=16g (or --ipc=host)"]))
    limit = env.usable_cores
    if limit < env.cores:
        out.append(Finding(
            "cpu-limit", "this process may use fewer cores than the machine has",
            [f"{env.cores} cores on the machine, {limit} usable by this process ({env.cores_because})"],
            [f"size DataLoader num_workers for {limit} cores, not os.cpu_count() = {env.cores} "
             "(iofeed.loader does by itself)"]))
    if env.versions.get("libjpeg_turbo") is None:
        out.append(Finding(
            "no-libjpeg-turbo", "Pillow is built without libjpeg-turbo: JPEG decoding is slower",
            [f"Pillow {env.versions.get('pillow')}: PIL.features reports no libjpeg_turbo"],
            ["install Pillow from the PyPI wheels, which bundle libjpeg-turbo"]))
    torch_version = env.versions.get("torch") or ""
    if env.gpus and "+cpu" in torch_version:
        out.append(Finding(
            "torch-cpu-build", "a GPU is present but torch is a CPU-only build",
            [f"torch {torch_version}, GPU {env.gpus[0]['name']}"],
            ["install a CUDA build of torch (pip install torch from the default index)"]))
    if env.gpus and env.dali_import != "ok":
        out.append(Finding(
            "no-dali", "DALI is not usable: no GPU JPEG decoding (iofeed engine=\"dali\")",
            [f"import nvidia.dali: {env.dali_import}"],
            ["pip install 'iofeed[dali]' (nvidia-dali-cuda120; for another CUDA version, its DALI package)"]))
    return out
