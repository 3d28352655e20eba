"""Host-to-GPU copies for the torch adapter: through reused pinned buffers, on a stream of their own."""
from __future__ import annotations

from typing import Any

import torch


class HostToDevice:
    """Copies one batch's host tensors to a CUDA device without holding up the training stream.

    A copy from pageable memory synchronises the stream it is queued on, and a copy queued on
    the training stream waits for every step queued before it. So each batch's tensors are
    staged in pinned buffers and copied on a side stream, which the current stream then waits
    for. Two sets of buffers alternate; a set is refilled only after its last copies finished.
    """

    def __init__(self, device: Any) -> None:
        self.device = device
        self._stream = torch.cuda.Stream(device)
        self._sets = [_PinnedSet(), _PinnedSet()]
        self._turn = 0

    def copy(self, *tensors: Any) -> list[Any]:
        """`tensors` (on the host) on the device, ready for work queued next on the current stream."""
        self._turn ^= 1
        pinned = self._sets[self._turn]
        pinned.done.synchronize()  # the copies that last read these buffers have finished
        consumer = torch.cuda.current_stream(self.device)
        with torch.cuda.stream(self._stream):
            copies = [pinned.stage(k, t).to(self.device, non_blocking=True) for k, t in enumerate(tensors)]
            pinned.done.record(self._stream)
        consumer.wait_stream(self._stream)
        for tensor in copies:
            tensor.record_stream(consumer)  # its memory is not reused before the consumer's work on it
        return copies


class _PinnedSet:
    """Pinned byte buffers, one per tensor position, grown as needed, and the event of their last copies."""

    def __init__(self) -> None:
        self._buffers: list[Any] = []
        self.done = torch.cuda.Event(blocking=True)  # waited on without spinning a core

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
