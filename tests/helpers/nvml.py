"""A stand-in for nvidia-ml-py (`pynvml`) on machines without an NVIDIA driver: GPUs with UUIDs,
utilisation and memory, and reads that start failing after a given number of calls."""
from __future__ import annotations

import types
from dataclasses import dataclass


class NVMLError(Exception):
    """pynvml's error type."""


@dataclass
class FakeGpu:
    uuid: str
    name: str = "NVIDIA H100 80GB HBM3"
    util: int = 50
    used: int = 1 << 30
    total: int = 80 << 30
    pids: tuple[int, ...] = ()


def fake_pynvml(gpus: list[FakeGpu], fail_after: int | None = None, migs: dict[str, int] | None = None):
    """A module with pynvml's calls over `gpus`; utilisation and memory reads raise NVMLError once
    `fail_after` of them have succeeded (None: never); `migs` maps MIG UUIDs to GPU positions."""
    reads = {"n": 0}

    def read(handle: int, value):
        reads["n"] += 1
        if fail_after is not None and reads["n"] > fail_after:
            raise NVMLError("GPU is lost")
        return value(gpus[handle])

    def by_uuid(uuid: str) -> int:
        if migs and uuid in migs:
            return migs[uuid]
        raise NVMLError("Not Found")

    def handle(i: int) -> int:
        if not 0 <= i < len(gpus):
            raise NVMLError("Invalid Argument")
        return i

    return types.SimpleNamespace(
        NVMLError=NVMLError, reads=reads,
        nvmlInit=lambda: None, nvmlShutdown=lambda: None,
        nvmlDeviceGetCount=lambda: len(gpus),
        nvmlDeviceGetHandleByIndex=handle,
        nvmlDeviceGetHandleByUUID=by_uuid,
        nvmlDeviceGetUUID=lambda h: gpus[h].uuid.encode(),
        nvmlDeviceGetName=lambda h: gpus[h].name,
        nvmlSystemGetDriverVersion=lambda: "580.65",
        nvmlDeviceGetUtilizationRates=lambda h: read(h, lambda g: types.SimpleNamespace(gpu=g.util)),
        nvmlDeviceGetMemoryInfo=lambda h: read(h, lambda g: types.SimpleNamespace(used=g.used, total=g.total)),
        nvmlDeviceGetComputeRunningProcesses=lambda h: [types.SimpleNamespace(pid=p) for p in gpus[h].pids],
    )


def four_gpus(**kwargs) -> types.SimpleNamespace:
    """Four GPUs whose UUIDs say their NVML index: GPU-0000aaaa-..., GPU-1111aaaa-..."""
    return fake_pynvml([FakeGpu(f"GPU-{i}{i}{i}{i}aaaa-0000-0000-0000-00000000000{i}", util=10 * (i + 1))
                        for i in range(4)], **kwargs)
