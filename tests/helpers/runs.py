"""Observing a running loader: its mid-epoch state and the slot memory it leaves behind."""
from __future__ import annotations

import os


def state_after(ld, batches: int) -> dict:
    """Take `batches` batches of the loader's current epoch, then its state (mid-epoch)."""
    for k, _ in enumerate(ld, start=1):
        if k == batches:
            return ld.state_dict()
    raise AssertionError(f"the epoch has fewer than {batches} batches")


def slot_memory() -> list[str]:
    """This process's descriptors and mappings of batch-slot memory: iofeed's memfd block, or any
    /dev/shm segment. Only this process is looked at, so other programs on the machine do not count."""
    targets = []
    for name in os.listdir("/proc/self/fd"):
        try:
            targets.append(os.readlink(f"/proc/self/fd/{name}"))
        except OSError:  # the descriptor listdir itself used, closed since
            pass
    with open("/proc/self/maps") as maps:
        targets += [parts[5].strip() for parts in (line.split(maxsplit=5) for line in maps) if len(parts) == 6]
    return sorted(t for t in targets if "iofeed-slots" in t or "/dev/shm/psm_" in t)
