"""Engine memory pinned in place for CUDA copies (issue 37): a refused registration leaves no CUDA
error behind for the staging fallback's kernels, and registration happens on the loader's own
device. On the CPU through a fake runtime that keeps CUDA's per-thread last error and a fake
device guard; on a GPU through the real ones."""
from __future__ import annotations

import contextlib

import numpy as np
import pytest

from iofeed.runtime.gpu.host_register import HOST_REGISTER_PORTABLE, HostRegistration, loaded_library

ALREADY_REGISTERED = 712  # cudaErrorHostMemoryAlreadyRegistered


class FakeRuntime:
    """CUDA's runtime as registration sees it: a refused call sets the last error, which stays until
    `cudaGetLastError` reads it; every call notes the device current when it ran and its flags."""

    def __init__(self, refuse: set[int] = frozenset()) -> None:
        self.refuse, self.last_error, self.current = refuse, 0, "cuda:0"
        self.calls: list[tuple[str, str, int | None]] = []

    def cudaHostRegister(self, address, size, flags):  # noqa: N802
        self.calls.append(("register", self.current, flags))
        if address in self.refuse:
            self.last_error = ALREADY_REGISTERED
            return ALREADY_REGISTERED
        return 0

    def cudaHostUnregister(self, address):  # noqa: N802
        self.calls.append(("unregister", self.current, None))
        return 0

    def cudaGetLastError(self):  # noqa: N802
        error, self.last_error = self.last_error, 0
        return error

    def launch_kernel(self) -> None:
        """What PyTorch does after each launch: a pending error fails the launch."""
        if error := self.cudaGetLastError():
            raise RuntimeError(f"CUDA error {error} at a kernel launch")

    def guard(self, device):
        @contextlib.contextmanager
        def current():
            before, self.current = self.current, str(device)
            try:
                yield
            finally:
                self.current = before
        return current()


def test_a_refused_registration_leaves_no_error_for_the_staged_copy_s_kernels():
    runtime = FakeRuntime(refuse={0x1000})
    registration = HostRegistration("cuda:0", runtime, runtime.guard)
    assert registration.pinned((0x1000, 4096)) is False, "refused: staged instead"
    runtime.launch_kernel()  # the staged copy and the normalisation launch kernels next
    assert registration.refused == {0x1000: ALREADY_REGISTERED}
    assert registration.pinned((0x1000, 4096)) is False and len(runtime.calls) == 1, "asked once per block"
    assert registration.pinned((0x2000, 4096)) is True and registration.registered == {0x2000}


def test_registration_runs_on_the_loader_s_device_with_the_portable_flag():
    """A rank on cuda:1 that never called set_device (current device 0) registered on GPU 0: a
    context there, on every rank."""
    runtime = FakeRuntime(refuse={0x3000})
    registration = HostRegistration("cuda:1", runtime, runtime.guard)
    for address in (0x1000, 0x2000, 0x1000, 0x3000):
        registration.pinned((address, 4096))
    registration.close()
    assert runtime.calls == [("register", "cuda:1", HOST_REGISTER_PORTABLE)] * 3 + [("unregister", "cuda:1", None)] * 2
    assert runtime.current == "cuda:0" and registration.registered == set(), "the guard restored the device"


def test_no_region_is_never_registered():
    runtime = FakeRuntime()
    assert HostRegistration("cuda:0", runtime, runtime.guard).pinned(None) is False and runtime.calls == []


def test_the_runtime_library_is_found_among_the_loaded_ones(tmp_path):
    maps = tmp_path / "maps"
    maps.write_text("7f00-7f01 r-xp 00000000 08:01 1 /usr/lib/libc.so.6\n"
                    "7f02-7f03 r-xp 00000000 08:01 2 /venv/nvidia/cu13/lib/libcudart.so.13\n"
                    "7f04-7f05 rw-p 00000000 00:00 0 [heap]\n")
    assert loaded_library("libcudart.so", str(maps)) == "/venv/nvidia/cu13/lib/libcudart.so.13"
    assert loaded_library("libcuda.so.1", str(maps)) is None
    assert loaded_library("libcudart.so", str(tmp_path / "absent")) is None


@pytest.mark.torch
@pytest.mark.gpu
def test_memory_cuda_refuses_to_register_is_staged_and_the_next_kernels_run():
    """Real CUDA: memory PyTorch already pinned is refused (already registered). Today the error was
    left set and the next kernel launch failed with it."""
    import torch

    from iofeed.adapters.torch.host_to_device import HostToDevice

    pinned = torch.arange(4096, dtype=torch.int32).to(torch.uint8).pin_memory()
    copier = HostToDevice("cuda:0")
    released = []
    try:
        (copy,) = copier.copy(pinned, region=(pinned.data_ptr(), pinned.numel()), release=lambda: released.append(1))
        assert copier.registration.refused and not copier.registration.registered
        doubled = copy.float() * 2  # kernels launched after the refusal
        torch.cuda.synchronize()
        assert released == [1], "staged: released at once"
        np.testing.assert_array_equal(doubled.cpu().numpy(), pinned.numpy().astype(np.float32) * 2)
    finally:
        copier.close()
