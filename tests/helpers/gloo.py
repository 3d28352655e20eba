"""Results of DDP ranks (gloo, CPU) handed to the test through files, not through a collective.

A DDP model keeps its gloo process group alive past `destroy_process_group()` and `gc.collect()`
(torch 2.14.1: the group's two worker threads still run after both), so they are still there when
the rank's interpreter exits, and what they hold is torn down during finalisation. Tensors Python
made (`all_gather_object`'s) released then need the GIL, which a thread cannot take any more: the
rank aborts with "terminate called without an active exception" (SIGABRT; PyTorch's account,
pytorch/pytorch#179291; docs/distributed.md). So after DDP training a rank sends nothing but a
`barrier()` (no tensors) through the group, and writes its result here."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any


def report(out: str | Path, rank: int, result: Any) -> None:
    """Write rank `rank`'s JSON result beside `out`."""
    _path(out, rank).write_text(json.dumps(result))


def reports(out: str | Path, world: int) -> list[Any]:
    """Every rank's result, in rank order."""
    return [json.loads(_path(out, rank).read_text()) for rank in range(world)]


def _path(out: str | Path, rank: int) -> Path:
    return Path(out).with_name(f"{Path(out).stem}-rank{rank}.json")
