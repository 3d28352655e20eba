"""Observing a running loader: its mid-epoch state and the shared memory it leaves behind."""
from __future__ import annotations

import os


def state_after(ld, batches: int) -> dict:
    """Take `batches` batches of the loader's current epoch, then its state (mid-epoch)."""
    for k, _ in enumerate(ld, start=1):
        if k == batches:
            return ld.state_dict()
    raise AssertionError(f"the epoch has fewer than {batches} batches")


def shm_entries() -> set[str]:
    """Names in /dev/shm (shared memory segments and named semaphores)."""
    return set(os.listdir("/dev/shm")) if os.path.isdir("/dev/shm") else set()
