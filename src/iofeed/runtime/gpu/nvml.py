"""NVML (nvidia-ml-py), the one wrapper iofeed has: GPUs in CUDA's numbering, what they are, and
readings that fail one at a time without ending the sampling.

The loader (how many GPUs are visible), `bench` (the GPU it ran on, its utilisation over time)
and `cli/doctor` (every GPU's utilisation and memory) all go through `Nvml`, so the same
`CUDA_VISIBLE_DEVICES` rules, failure notes and shutdown apply everywhere.
"""
from __future__ import annotations

import importlib.util
import os
import sys
from collections import Counter
from collections.abc import Callable, Mapping
from typing import Any


class Nvml:
    """An NVML session (`nvmlInit` now, `nvmlShutdown` at `close()`), or none: `ok` is False when
    nvidia-ml-py, the driver or a device is missing, and every method then answers "no GPU"."""

    def __init__(self) -> None:
        self.module: Any = None
        self.error: str | None = None  # why there is no session
        self.failures: Counter[str] = Counter()  # error text -> readings it left missing
        try:
            import pynvml

            pynvml.nvmlInit()
        except Exception as exc:  # noqa: BLE001 - not installed, no driver, no device: all mean "no GPU"
            self.error = str(exc) or type(exc).__name__
            return
        self.module = pynvml

    @property
    def ok(self) -> bool:
        return self.module is not None

    def __enter__(self) -> Nvml:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Shut NVML down (idempotent)."""
        if self.module is not None:
            self.module.nvmlShutdown()
            self.module = None

    def every_handle(self) -> list[Any]:
        """Every GPU of the machine, in NVML's order."""
        nvml = self.module
        return [nvml.nvmlDeviceGetHandleByIndex(i) for i in range(nvml.nvmlDeviceGetCount())]

    def visible(self, env: Mapping[str, str] | None = None) -> list[Any]:
        """Handles of the GPUs CUDA sees (`CUDA_VISIBLE_DEVICES` of `env`), in CUDA's order."""
        env = os.environ if env is None else env
        return visible_nvml_handles(self.module, cuda_visible_devices(env.get("CUDA_VISIBLE_DEVICES")))

    def reading(self, read: Callable[[], Any]) -> float:
        """`read()` as a float, or NaN with its error counted (a failed read is missing, never the end)."""
        try:
            return float(read())
        except Exception as exc:  # noqa: BLE001 - a lost GPU, an unsupported query: one reading missing
            self.failures[f"{type(exc).__name__}: {exc}"] += 1
            return float("nan")

    def utilisation(self, handle: Any) -> float:
        """% of NVML's last sample period (1/6 s to 1 s) in which a kernel ran; NaN if the read failed."""
        return self.reading(lambda: self.module.nvmlDeviceGetUtilizationRates(handle).gpu)

    def used_memory(self, handle: Any) -> float:
        """Bytes used on the device by every process; NaN if the read failed."""
        return self.reading(lambda: self.module.nvmlDeviceGetMemoryInfo(handle).used)

    def notes(self, what: str) -> list[str]:
        """One line per kind of failed reading, saying where those readings went (`what`)."""
        return [f"NVML failed {count} {what}: {error}" for error, count in dict(self.failures).items()]


def text(value: bytes | str) -> str:
    """An NVML string (bytes in older nvidia-ml-py) as str."""
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
    uuids = [text(nvml.nvmlDeviceGetUUID(h)) for h in every]
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
            if _bare_uuid(text(nvml.nvmlDeviceGetUUID(handle))) == wanted:
                return handle
        return None
    env = os.environ if env is None else env
    handles = visible_nvml_handles(nvml, cuda_visible_devices(env.get("CUDA_VISIBLE_DEVICES")))
    return handles[index] if 0 <= index < len(handles) else None


def _bare_uuid(uuid: str) -> str:
    """A UUID without its "GPU-" prefix, lower case (PyTorch and NVML write them differently)."""
    value = str(uuid).lower()
    return value[4:] if value.startswith("gpu-") else value


def _torch_uuid(index: int) -> str | None:
    """CUDA's UUID of device `index` when PyTorch has already started CUDA (never starts it)."""
    torch = sys.modules.get("torch")
    try:
        if torch is None or not torch.cuda.is_initialized():
            return None
        return str(torch.cuda.get_device_properties(index).uuid)
    except Exception:  # noqa: BLE001 - an index CUDA does not have, an old PyTorch without .uuid
        return None


def gpu_info(index: int = 0) -> dict[str, Any] | None:
    """Name, driver and memory of CUDA device `index` from NVML (None: no NVML, or no such GPU).

    `index` counts as CUDA does, over the GPUs `CUDA_VISIBLE_DEVICES` leaves visible. A read that
    fails is null, and its error is listed under "errors": the caller's results are kept.
    """
    with Nvml() as session:
        if not session.ok:
            return None
        nvml = session.module
        try:
            handle = cuda_nvml_handle(nvml, index)
        except nvml.NVMLError:
            return None
        if handle is None:
            return None
        errors: list[str] = []
        return {
            "name": _read(nvml, errors, "name", lambda: text(nvml.nvmlDeviceGetName(handle))),
            "driver": _read(nvml, errors, "driver", lambda: text(nvml.nvmlSystemGetDriverVersion())),
            "memory_bytes": _read(nvml, errors, "memory", lambda: int(nvml.nvmlDeviceGetMemoryInfo(handle).total)),
            **({"errors": errors} if errors else {}),
        }


def _read(nvml: Any, errors: list[str], what: str, read: Callable[[], Any]) -> Any:
    """`read()`, or None with "what: error" added to `errors` when NVML fails."""
    try:
        return read()
    except nvml.NVMLError as exc:
        errors.append(f"{what}: {exc}")
        return None


def visible_gpu_count(env: Mapping[str, str] | None = None) -> int:
    """CUDA GPUs this process may use: NVML's GPUs left visible by `CUDA_VISIBLE_DEVICES`
    (nvidia-ml-py installed), else PyTorch's count; 0 when neither can say."""
    with Nvml() as session:
        if not session.ok:
            return _torch_gpu_count()
        try:
            return len(session.visible(env))
        except session.module.NVMLError:
            return _torch_gpu_count()


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
