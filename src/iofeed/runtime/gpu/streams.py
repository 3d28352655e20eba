"""CUDA streams and device ordinals as DALI and the adapters take them."""
from __future__ import annotations

import sys
from typing import Any


def cuda_device_id(device: str) -> int | None:
    """DALI's `device_id` for the loader's device as `LoaderOptions` resolved it ("cpu" or
    "cuda:N"), resolved nowhere else: None for the CPU, else the CUDA ordinal."""
    return None if device == "cpu" else int(device.split(":")[1])


def consumer_stream(device_id: int | None) -> Any:
    """PyTorch's current CUDA stream on `device_id` when DALI runs there and PyTorch has
    initialised CUDA, else None: what to pass to `pipe.run()`.

    DALI binds its outputs to this stream: the consumer's kernels wait for them without a host
    sync, and DALI frees each output in that stream's order, after the kernels queued on it have
    read it. Without a stream the outputs are host-synchronous and freed as soon as the last
    reference goes, possibly before queued kernels have read them.
    """
    torch = sys.modules.get("torch")
    if device_id is None or torch is None or not torch.cuda.is_initialized():
        return None
    return torch.cuda.current_stream(device_id)
