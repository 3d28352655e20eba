"""A batch's hold on the engine memory it lies in: given back once, when an adapter has copied the
batch out (`Lease.release`), or when the last array over that memory is dropped (`leased`).

Engines reuse their memory (the workers engine's shared-memory slots): a slot returns to the
pool only through its lease, so a batch the consumer keeps (a list, a replay buffer, an array
JAX aliases or reads asynchronously) stays what it was when it arrived.
"""
from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np


class Lease:
    """One batch's hold on engine memory: `release()` calls `give_back` once, from any thread
    (JAX and TensorFlow drop arrays on threads of their own)."""

    __slots__ = ("_give_back",)

    def __init__(self, give_back: Callable[[], None]) -> None:
        self._give_back = [give_back]

    def release(self) -> None:
        """Give the memory back (again: nothing)."""
        try:
            give_back = self._give_back.pop()  # atomic: only one caller gets it
        except IndexError:
            return
        give_back()

    @property
    def released(self) -> bool:
        return not self._give_back


class _Holder:
    """The base object of a leased array: it exposes the engine's memory to numpy and releases
    the lease when the last array (view, slice, tensor sharing it) over it is gone."""

    def __init__(self, view: np.ndarray, lease: Lease) -> None:
        self._view = view  # keeps the mapping alive as long as any array over it
        self._lease = lease
        self.__array_interface__ = view.__array_interface__

    def __del__(self) -> None:
        self._lease.release()


def leased(view: np.ndarray, lease: Lease) -> np.ndarray:
    """`view` as an array whose memory holds `lease` until nothing refers to it any more."""
    return np.asarray(_Holder(view, lease))


def owned(images: Any) -> Any:
    """A copy of a batch's images that holds no engine memory (numpy, or packed pixels)."""
    if isinstance(images, np.ndarray):
        return np.array(images)
    return images.copy()
