"""Host-to-GPU copies for the torch adapter: on a stream of their own, from engine memory pinned in
place when it can be, else through reused pinned buffers."""
from __future__ import annotations

from collections import deque
from collections.abc import Callable
from typing import Any

import torch

from ...runtime.gpu.host_register import HostRegistration


class HostToDevice:
    """Copies one batch's host tensors to a CUDA device without holding up the training stream.

    A copy from pageable memory synchronises the stream it is queued on, and a copy queued on
    the training stream waits for every step queued before it. So copies run on a side stream,
    which the current stream then waits for, from pinned memory:

    - the engine's own memory (the workers engine's slots), registered as pinned once per block
      (`HostRegistration`) and copied straight from the slot: no host copy of the batch. The
      slot's lease is released once the copy's event has completed (looked at on each call), not
      before;
    - otherwise (memory that cannot be registered) staged in pinned buffers: two sets alternate,
      a set refilled only after its last copies finished, the lease released once staged.

    Everything runs with `device` as the current CUDA device (registration, pinned allocations):
    a rank on "cuda:N" that never called `set_device` makes no context on GPU 0.
    """

    def __init__(self, device: Any, registration: HostRegistration | None = None) -> None:
        self.device = torch.device(device)
        self._stream = torch.cuda.Stream(self.device)  # type: ignore[no-untyped-call]  # unannotated in torch
        self._sets = [_PinnedSet(), _PinnedSet()]
        self._turn = 0
        self.registration = registration if registration is not None else HostRegistration(self.device)
        # (copy done event, release, the host tensor: kept, or dropping it would release the memory early)
        self._pending: deque[tuple[Any, Callable[[], None], Any]] = deque()

    def copy(self, *tensors: Any, region: tuple[int, int] | None = None,
             release: Callable[[], None] | None = None) -> list[Any]:
        """`tensors` (on the host) on the device, ready for work queued next on the current stream.
        `tensors[0]` lies in engine memory `region` (address, bytes) when given; `release` gives it
        back to the engine, once nothing will read it any more."""
        with torch.cuda.device(self.device):
            return self._copy(tensors, region, release)

    def _copy(self, tensors: tuple[Any, ...], region: tuple[int, int] | None,
              release: Callable[[], None] | None) -> list[Any]:
        self._release_finished()
        direct = self.pinned_in_place(region)
        self._turn ^= 1
        pinned = self._sets[self._turn]
        pinned.done.synchronize()  # the copies that last read these buffers have finished
        consumer = torch.cuda.current_stream(self.device)
        with torch.cuda.stream(self._stream):
            copies = [(t if direct and k == 0 else pinned.stage(k, t)).to(self.device, non_blocking=True)
                      for k, t in enumerate(tensors)]
            pinned.done.record(self._stream)
        if release is not None:
            if direct:
                self._pending.append((_recorded(self._stream), release, tensors[0]))
            else:
                release()  # staged: the engine's memory was read on this thread already
        consumer.wait_stream(self._stream)
        for tensor in copies:
            tensor.record_stream(consumer)  # its memory is not reused before the consumer's work on it
        return copies

    def pinned_in_place(self, region: tuple[int, int] | None) -> bool:
        """Whether `region` is (now) registered as pinned memory; registered once, on first sight."""
        return self.registration.pinned(region)

    def close(self) -> None:
        """Wait for the copies under way, release their engine memory, and unregister the blocks
        pinned in place (before the engine unmaps them: registered memory must not be unmapped)."""
        self._stream.synchronize()
        self._release_finished()
        self.registration.close()

    def _release_finished(self) -> None:
        """Release the engine memory of copies that have completed, oldest first."""
        while self._pending and self._pending[0][0].query():
            self._pending.popleft()[1]()


def _recorded(stream: Any) -> Any:
    """An event recorded on `stream` now."""
    event = torch.cuda.Event()  # type: ignore[no-untyped-call]  # unannotated in torch
    event.record(stream)
    return event


class _PinnedSet:
    """Pinned byte buffers, one per tensor position, grown as needed, and the event of their last copies."""

    def __init__(self) -> None:
        self._buffers: list[Any] = []
        # waited on without spinning a core
        self.done = torch.cuda.Event(blocking=True)  # type: ignore[no-untyped-call]  # unannotated in torch

    def stage(self, k: int, tensor: Any) -> Any:
        """`tensor` copied into pinned buffer `k`, as a tensor of its dtype and shape."""
        nbytes = tensor.numel() * tensor.element_size()
        if len(self._buffers) <= k:
            self._buffers.append(None)
        if self._buffers[k] is None or self._buffers[k].numel() < nbytes:
            # a quarter more than asked: packed batches (gpu_augment) vary in size from batch to batch
            self._buffers[k] = torch.empty(nbytes + nbytes // 4, dtype=torch.uint8, pin_memory=True)
        staged = self._buffers[k][:nbytes].view(tensor.dtype).view(tensor.shape)
        staged.copy_(tensor)
        return staged
