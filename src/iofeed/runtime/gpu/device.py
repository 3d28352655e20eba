"""Which device a loader works on: the user's `device` resolved once, to "cpu" or "cuda:N".

`Placement(device="cuda")` names no GPU: DALI, the adapter's constants and the copies must not each pick
one at a different time (docs/decisions/0062-device-resolves-the-device-once-device-cuda.md). `loader()` resolves
it here, once, and gives engine and adapter the result.
"""
from __future__ import annotations

import os
import re
import sys
from collections.abc import Callable, Mapping
from typing import Any

from ...errors import OptionError

_CUDA = re.compile(r"cuda(?::(\d+))?")
_CPU = re.compile(r"cpu(?::\d+)?")  # torch's spellings of the host: "cpu", "cpu:0" (torch.device("cpu", 0))


def resolve_device(device: Any, *, current: int | None, env: Mapping[str, str],
                   device_count: Callable[[], int]) -> str:
    """"cpu" or "cuda:N" for `device` (None, "cpu", "cpu:N", "cuda", "cuda:N", an int N, a
    torch.device: accelerate's `accelerator.device` in a multi-process CPU run is `cpu:0`).

    An explicit index wins; else `current` (the current CUDA device, when CUDA is initialised);
    else `LOCAL_RANK` from `env` (torchrun), which must name a visible GPU (`device_count()`);
    else 0.
    """
    if device is None:
        return "cpu"
    if isinstance(device, int) and not isinstance(device, bool) and device >= 0:
        return f"cuda:{device}"
    text = str(device)
    if _CPU.fullmatch(text):
        return "cpu"
    match = _CUDA.fullmatch(text)
    if match is None:
        raise OptionError(f"Placement.device={device!r} is not a device iofeed can load batches onto "
                          "(use None, 'cpu', 'cuda', 'cuda:N' or an int N)")
    if match[1] is not None:
        return f"cuda:{int(match[1])}"
    if current is not None:
        return f"cuda:{current}"
    local = env.get("LOCAL_RANK")
    if local is None:
        return "cuda:0"
    if not local.isdigit():
        raise OptionError(f"LOCAL_RANK={local!r} is not a rank (0 or more): pass placement=iofeed.Placement("
                          "device='cuda:N') instead")
    count = device_count()
    if int(local) >= count:
        raise OptionError(f"Placement.device='cuda' under LOCAL_RANK={local}, but {count} GPU(s) are visible: call "
                          "torch.cuda.set_device(...) before building the loader, or pass placement=iofeed.Placement("
                          "device='cuda:N')")
    return f"cuda:{int(local)}"


def loader_device(device: Any) -> str:
    """`resolve_device` with this process's facts (PyTorch's current device only if it started CUDA)."""
    from .nvml import visible_gpu_count

    torch = sys.modules.get("torch")
    current = int(torch.cuda.current_device()) if torch is not None and torch.cuda.is_initialized() else None
    return resolve_device(device, current=current, env=os.environ, device_count=visible_gpu_count)


def usable_device(device: Any) -> str:
    """`loader_device(device)`, refused with one line when it is a GPU this process cannot see."""
    from .nvml import visible_gpu_count

    resolved = loader_device(device)
    check_visible(resolved, device, visible_gpu_count)
    return resolved


def check_visible(resolved: str, asked: Any, device_count: Callable[[], int]) -> None:
    """OptionError (one line, naming the fix) when `resolved` is a CUDA device this process cannot
    see: found at `loader()`, not as a driver traceback at the first batch. `device_count` reads
    NVML (else PyTorch's count), so no CUDA context is made."""
    if resolved == "cpu":
        return
    count, index = device_count(), int(resolved.split(":")[1])
    if count == 0:
        raise OptionError(f"Placement.device={asked!r}, but no CUDA device is available here: pass "
                          "placement=iofeed.Placement(device='cpu') (or leave placement out)")
    if index >= count:
        raise OptionError(f"Placement.device={asked!r} is GPU {index}, but {count} GPU(s) are visible here "
                          f"(CUDA_VISIBLE_DEVICES={os.environ.get('CUDA_VISIBLE_DEVICES', 'unset')}): "
                          f"pass Placement(device='cuda:N') with N < {count}, or Placement(device='cpu')")
