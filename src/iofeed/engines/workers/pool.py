"""Which of the engine's batch slots are free, decoding, or lent to the consumer with its batch."""
from __future__ import annotations

from collections import deque
from collections.abc import Callable, Collection
from functools import partial
from typing import Any

import numpy as np

from ..lease import Lease, leased, owned


class SlotPool:
    """The slots of one workers engine. A delivered batch is lent with its slot: the slot comes back
    only through the batch's lease (released by the adapter after its copy, or when the consumer
    drops the batch), and free slots are reused oldest first.

    The consumer may hold all slots but one as lent batches; past that it gets owned copies
    (`copied`), so the engine always keeps a slot to decode the next batch into and never waits
    for a consumer that keeps everything (`list(loader)`). A consumer streaming batches holds two
    at the moment it is handed the next one (the one it is still bound to, and the new one):
    the slot the engine keeps spare for that (see `WorkerEngine._depth`) means no copy then.
    """

    def __init__(self, slots: int) -> None:
        self.slots = slots
        self.copied = 0  # batches handed out as copies
        self._free: deque[int] = deque(range(slots))
        self._lent: set[int] = set()
        self._returned: deque[int] = deque()  # appended by leases, on any thread

    def start_pass(self, in_flight: Collection[int] = ()) -> None:
        """A new pass: every slot neither lent nor `in_flight` is free."""
        self._collect()
        self._free = deque(s for s in range(self.slots) if s not in self._lent and s not in in_flight)

    def take(self) -> int | None:
        """A free slot to decode into (the one free the longest), or None."""
        self._collect()
        return self._free.popleft() if self._free else None

    def give_back(self, slot: int) -> None:
        """A slot the engine itself is done with."""
        self._free.append(slot)

    def hand_out(self, slot: int, images_of: Callable[[Callable[[np.ndarray], Any]], Any]) -> tuple[Any, Lease | None]:
        """The images of `slot` for the consumer, from `images_of(wrap)`: lent (a leased view), or
        copied and the slot freed at once when the consumer already holds all it may."""
        self._collect()
        if len(self._lent) <= self.slots - 2:
            lease = Lease(partial(self._returned.append, slot))
            self._lent.add(slot)
            return images_of(partial(leased, lease=lease)), lease
        images = owned(images_of(np.asarray))
        self.give_back(slot)
        self.copied += 1
        return images, None

    @property
    def lent(self) -> int:
        """Slots the consumer holds now."""
        self._collect()
        return len(self._lent)

    def _collect(self) -> None:
        """Slots whose leases were released since: free again."""
        while self._returned:
            slot = self._returned.popleft()
            self._lent.discard(slot)
            self._free.append(slot)
