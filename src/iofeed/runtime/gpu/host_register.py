"""Engine memory pinned in place for CUDA copies (`cudaHostRegister`), on the loader's own device,
with a refusal cleared so that the staging fallback's kernels do not inherit it
(docs/decisions/0068-host-to-device-registers-the-engine-s.md)."""
from __future__ import annotations

import ctypes
import sys
from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import Any, Protocol

# cudaHostRegisterPortable: the memory counts as pinned for every CUDA context, not only the
# one current when it was registered (what PyTorch's own pinning uses, torch/cuda/_pin_memory_utils.py)
HOST_REGISTER_PORTABLE = 1


class CudaRuntime(Protocol):
    """The CUDA runtime calls registration needs (PyTorch's `torch.cuda.cudart()` plus
    `cudaGetLastError`, which PyTorch does not expose)."""

    def cudaHostRegister(self, address: int, size: int, flags: int) -> Any: ...  # noqa: N802 - CUDA's names
    def cudaHostUnregister(self, address: int) -> Any: ...  # noqa: N802
    def cudaGetLastError(self) -> Any: ...  # noqa: N802


class HostRegistration:
    """Blocks of host memory registered as pinned, once each, while `device` is the current CUDA
    device (`guard(device)`): registering makes or uses a context on the current device, so
    without the guard a rank on "cuda:N" that never called `set_device` made one on GPU 0.

    A refused block (a platform without registration, memory already pinned) is remembered and
    staged instead; the runtime's last error, which a refusal sets, is read and so cleared:
    PyTorch checks `cudaGetLastError` after every kernel launch, and the next kernel (the staged
    copy's, the normalisation's) failed with the registration's error."""

    def __init__(self, device: Any, runtime: CudaRuntime | None = None,
                 guard: Callable[[Any], AbstractContextManager[Any]] | None = None) -> None:
        self.device = device
        self._runtime = runtime if runtime is not None else TorchRuntime()
        self._guard = guard if guard is not None else _torch_guard
        self.registered: set[int] = set()  # block addresses
        self.refused: dict[int, int] = {}  # block address -> the CUDA error that refused it

    def pinned(self, region: tuple[int, int] | None) -> bool:
        """Whether `region` (address, bytes) is registered now; registered on first sight."""
        if region is None or region[0] in self.refused:
            return False
        address, size = region
        if address not in self.registered:
            with self._guard(self.device):
                status = int(self._runtime.cudaHostRegister(address, size, HOST_REGISTER_PORTABLE))
                if status != 0:
                    self._runtime.cudaGetLastError()  # clears it: the fallback's kernels must not report it
                    self.refused[address] = status
                    return False
            self.registered.add(address)
        return True

    def close(self) -> None:
        """Unregister every block (before its owner unmaps it: registered memory must not be unmapped)."""
        with self._guard(self.device):
            for address in self.registered:
                if int(self._runtime.cudaHostUnregister(address)) != 0:
                    self._runtime.cudaGetLastError()
        self.registered.clear()


class TorchRuntime:
    """PyTorch's CUDA runtime bindings, and `cudaGetLastError` from the same runtime library
    (the last error is per thread and per runtime library: it must be the one PyTorch uses)."""

    def __init__(self) -> None:
        import torch

        self._cudart: Any = torch.cuda.cudart()  # type: ignore[no-untyped-call]  # unannotated in torch
        self._get_last_error = _runtime_function("cudaGetLastError")

    def cudaHostRegister(self, address: int, size: int, flags: int) -> Any:  # noqa: N802
        return self._cudart.cudaHostRegister(address, size, flags)

    def cudaHostUnregister(self, address: int) -> Any:  # noqa: N802
        return self._cudart.cudaHostUnregister(address)

    def cudaGetLastError(self) -> Any:  # noqa: N802
        return self._get_last_error()


def _runtime_function(name: str) -> Callable[[], int]:
    """`name` from the CUDA runtime library loaded in this process (PyTorch's: libcudart.so.N,
    found in /proc/self/maps, so that dlopen hands back the same instance); a function answering
    0 where none is loaded apart (a runtime linked statically into PyTorch: nothing to reach)."""
    path = loaded_library("libcudart.so")
    if path is None:
        return lambda: 0
    function: Callable[[], int] = getattr(ctypes.CDLL(path), name)
    function.restype = ctypes.c_int  # type: ignore[attr-defined]  # a ctypes function, typed as its call
    return function


def loaded_library(stem: str, maps: str = "/proc/self/maps") -> str | None:
    """The path of a loaded shared library whose file name starts with `stem`, or None."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        with open(maps) as f:
            for line in f:
                path = line.rstrip("\n").split(maxsplit=5)[-1]
                if path.startswith("/") and path.rsplit("/", 1)[-1].startswith(stem):
                    return path
    except OSError:
        return None
    return None


def _torch_guard(device: Any) -> AbstractContextManager[Any]:
    import torch

    return torch.cuda.device(device)
