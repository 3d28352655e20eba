"""What this machine offers a training job: CPU, cores, library versions, GPUs (NVML), DALI.

One place for the probes that the loader, `bench` and `doctor` each need.
"""
from __future__ import annotations

import importlib
import importlib.metadata
import importlib.util
import os
import platform
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .errors import OptionError

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
    """Name, driver and memory of CUDA device `index` from NVML (None: no NVML, or no such GPU).

    `index` counts as CUDA does, over the GPUs `CUDA_VISIBLE_DEVICES` leaves visible. A read that
    fails is null, and its error is listed under "errors": the caller's results are kept.
    """
    try:
        import pynvml
    except ImportError:
        return None
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError:
        return None
    try:
        try:
            handle = cuda_nvml_handle(pynvml, index)
        except pynvml.NVMLError:
            return None
        if handle is None:
            return None
        errors: list[str] = []
        return {
            "name": _read(pynvml, errors, "name", lambda: _text(pynvml.nvmlDeviceGetName(handle))),
            "driver": _read(pynvml, errors, "driver", lambda: _text(pynvml.nvmlSystemGetDriverVersion())),
            "memory_bytes": _read(pynvml, errors, "memory",
                                  lambda: int(pynvml.nvmlDeviceGetMemoryInfo(handle).total)),
            **({"errors": errors} if errors else {}),
        }
    finally:
        pynvml.nvmlShutdown()


def _read(nvml: Any, errors: list[str], what: str, read: Callable[[], Any]) -> Any:
    """`read()`, or None with "what: error" added to `errors` when NVML fails."""
    try:
        return read()
    except nvml.NVMLError as exc:
        errors.append(f"{what}: {exc}")
        return None


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value


def cuda_visible_devices(value: str | None) -> list[str] | None:
    """The entries of `CUDA_VISIBLE_DEVICES` as CUDA takes them; None when unset (every GPU).

    Entries are NVML indices, `GPU-<uuid>` (or a unique prefix) or `MIG-<uuid>`; like CUDA, the
    list ends at the first entry that is none of these (an empty string, a negative index).
    """
    if value is None:
        return None
    entries = []
    for entry in value.split(","):
        entry = entry.strip()
        if not (entry.isdigit() or entry.startswith(("GPU-", "MIG-"))):
            break
        entries.append(entry)
    return entries


def visible_nvml_handles(nvml: Any, visible: list[str] | None) -> list[Any]:
    """NVML handles of the GPUs CUDA sees, in CUDA's order (NVML numbers every GPU of the machine)."""
    count = nvml.nvmlDeviceGetCount()
    if visible is None:
        return [nvml.nvmlDeviceGetHandleByIndex(i) for i in range(count)]
    every = [nvml.nvmlDeviceGetHandleByIndex(i) for i in range(count)]
    uuids = [_text(nvml.nvmlDeviceGetUUID(h)) for h in every]
    handles = []
    for entry in visible:
        if entry.isdigit():
            found = [every[int(entry)]] if int(entry) < count else []
        elif entry.startswith("MIG-"):
            try:
                found = [nvml.nvmlDeviceGetHandleByUUID(entry)]
            except nvml.NVMLError:
                found = []
        else:
            found = [h for h, uuid in zip(every, uuids) if uuid.startswith(entry)]
        if len(found) != 1:  # CUDA stops at an entry it cannot resolve (or an ambiguous prefix)
            break
        handles.append(found[0])
    return handles


def cuda_nvml_handle(nvml: Any, index: int, env: Mapping[str, str] | None = None, uuid: str | None = None) -> Any:
    """NVML's handle of CUDA device `index` (None: not visible).

    By `uuid` (what CUDA reports for the device) when given, else through `CUDA_VISIBLE_DEVICES`
    in `env` (default: this process's environment); PyTorch's UUID is used once it has started CUDA.
    """
    uuid = uuid if uuid is not None else _torch_uuid(index)
    if uuid is not None:
        wanted = _bare_uuid(uuid)
        for i in range(nvml.nvmlDeviceGetCount()):
            handle = nvml.nvmlDeviceGetHandleByIndex(i)
            if _bare_uuid(_text(nvml.nvmlDeviceGetUUID(handle))) == wanted:
                return handle
        return None
    env = os.environ if env is None else env
    handles = visible_nvml_handles(nvml, cuda_visible_devices(env.get("CUDA_VISIBLE_DEVICES")))
    return handles[index] if 0 <= index < len(handles) else None


def _bare_uuid(uuid: str) -> str:
    """A UUID without its "GPU-" prefix, lower case (PyTorch and NVML write them differently)."""
    text = str(uuid).lower()
    return text[4:] if text.startswith("gpu-") else text


def _torch_uuid(index: int) -> str | None:
    """CUDA's UUID of device `index` when PyTorch has already started CUDA (never starts it)."""
    torch = sys.modules.get("torch")
    try:
        if torch is None or not torch.cuda.is_initialized():
            return None
        return str(torch.cuda.get_device_properties(index).uuid)
    except Exception:  # noqa: BLE001 - an index CUDA does not have, an old PyTorch without .uuid
        return None


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
class Share:
    """One local rank's share of a machine resource, and how it was found."""

    amount: int
    because: str


def usable_cores(root: Path = CGROUP_ROOT, environ: Mapping[str, str] = os.environ) -> Share:
    """Cores this process may use: CPU affinity ∩ cgroup quota, split among the local ranks, at least 1."""
    affinity = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    quota = cgroup_cpu_quota(root)
    ranks = local_ranks(environ)
    cores = min(affinity, max(1, int(quota))) if quota is not None else affinity
    return Share(max(1, cores // ranks),
                 f"affinity {affinity}, quota {'none' if quota is None else f'{quota:g}'}, local ranks {ranks}")


def usable_memory(root: Path = CGROUP_ROOT, environ: Mapping[str, str] = os.environ) -> Share:
    """Bytes this process may allocate: available RAM, capped by the cgroup limit, split among the local ranks."""
    ram = available_ram()
    room = cgroup_memory_room(root)
    ranks = local_ranks(environ)
    found = min(ram, room) if room is not None else ram
    cgroup = "none" if room is None else f"{room:,} bytes left"
    return Share(found // ranks, f"available RAM {ram:,} bytes, cgroup limit {cgroup}, local ranks {ranks}")


def dali_import_status() -> str:
    """"ok" when `nvidia.dali` imports, else the reason."""
    try:
        importlib.import_module("nvidia.dali")
    except Exception as exc:  # noqa: BLE001 - a broken DALI raises all sorts of errors
        return f"{type(exc).__name__}: {exc}".splitlines()[0]
    return "ok"


def visible_gpu_count(env: Mapping[str, str] | None = None) -> int:
    """CUDA GPUs this process may use: NVML's GPUs left visible by `CUDA_VISIBLE_DEVICES`
    (nvidia-ml-py installed), else PyTorch's count; 0 when neither can say."""
    try:
        import pynvml

        pynvml.nvmlInit()
    except Exception:  # noqa: BLE001 - not installed, no driver: ask torch
        return _torch_gpu_count()
    try:
        env = os.environ if env is None else env
        return len(visible_nvml_handles(pynvml, cuda_visible_devices(env.get("CUDA_VISIBLE_DEVICES"))))
    except pynvml.NVMLError:
        return _torch_gpu_count()
    finally:
        pynvml.nvmlShutdown()


def _torch_gpu_count() -> int:
    try:
        if importlib.util.find_spec("torch") is None:
            return 0
        import torch

        return int(torch.cuda.device_count())
    except Exception:  # noqa: BLE001
        return 0


def gpu_present() -> bool:
    """Whether a CUDA GPU is visible to this process (`CUDA_VISIBLE_DEVICES` respected)."""
    return visible_gpu_count() > 0
