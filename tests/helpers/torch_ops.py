"""What PyTorch really did inside a call, seen through a dispatch mode: the kernels that wrote at least
a batch's worth of values (`BatchWrites`), and the peak of the memory held by the tensors the call
made (`PeakTemporaries`)."""
from __future__ import annotations

import weakref
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

VIEWS = {"view", "_unsafe_view", "permute", "as_strided", "slice", "select", "unbind", "expand", "alias",
         "reshape", "unsqueeze", "squeeze", "t", "transpose", "detach", "lift_fresh", "view_as_real",
         "empty", "empty_strided", "empty_like", "new_empty", "new_empty_strided"}  # and allocations: no writing


def _name(func: Any) -> str:
    return func.overloadpacket.__name__.rstrip("_") if hasattr(func, "overloadpacket") else str(func)


class BatchWrites(TorchDispatchMode):
    """The non-view kernels whose output holds at least `values` elements, in call order (their names)."""

    def __init__(self, values: int) -> None:
        super().__init__()
        self.values, self.ops = values, []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        name = _name(func)
        if name not in VIEWS and any(isinstance(t, torch.Tensor) and t.numel() >= self.values
                                     for t in tree_flatten(out)[0]):
            self.ops.append(name)
        return out


class PeakTemporaries(TorchDispatchMode):
    """The most bytes held at once by the storages of tensors made inside the mode (views counted once,
    a storage freed when the last tensor over it is gone); tensors passed in are not counted."""

    def __init__(self) -> None:
        super().__init__()
        self.now = self.peak = 0
        self.dtypes: set[Any] = set()
        self._seen: dict[int, list[int]] = {}  # storage address -> [bytes, live tensors over it]
        self._outside: set[int] = set()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        for t in tree_flatten((args, kwargs))[0]:
            if isinstance(t, torch.Tensor) and t.untyped_storage().data_ptr() not in self._seen:
                self._outside.add(t.untyped_storage().data_ptr())
        out = func(*args, **(kwargs or {}))
        for t in tree_flatten(out)[0]:
            if isinstance(t, torch.Tensor):
                self._track(t)
        return out

    def _track(self, tensor: torch.Tensor) -> None:
        address = tensor.untyped_storage().data_ptr()
        if address in self._outside or tensor.untyped_storage().nbytes() == 0:
            return
        entry = self._seen.get(address)
        if entry is None:
            entry = self._seen[address] = [tensor.untyped_storage().nbytes(), 0]
            self.now += entry[0]
            self.peak = max(self.peak, self.now)
            self.dtypes.add((tensor.dtype, tensor.numel()))
        entry[1] += 1
        weakref.finalize(tensor, self._drop, address)

    def _drop(self, address: int) -> None:
        entry = self._seen[address]
        entry[1] -= 1
        if entry[1] == 0:
            self.now -= entry[0]
            del self._seen[address]
