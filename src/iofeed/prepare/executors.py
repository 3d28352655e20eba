"""Preprocess engines: each maps `prepare_file` over the tasks, results in task order."""
from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass

from ..errors import OptionError
from ..runtime.processes import resolve_workers
from ..runtime.registry import Entry, Registry
from .file import Prepared, Task, prepare_file
from .pool import ordered_map


@dataclass(frozen=True)
class PrepareCaps:
    """What a preprocess engine takes."""

    address: bool  # runs on a cluster named by `--address`


# An entry's target is a context manager `target(tasks, *, workers, address)` of results in task order.
ENGINES: Registry[PrepareCaps] = Registry("engine", {
    "local": Entry("iofeed.prepare.executors:local_engine", PrepareCaps(address=False)),
    "ray": Entry("iofeed.prepare.ray:ray_engine", PrepareCaps(address=True), extra="ray"),
})


def _prepare_task(task: Task) -> Prepared:
    return prepare_file(*task)


def _died(task: Task, reason: str) -> Prepared:
    """The rejection of a file whose worker died preparing it."""
    return Prepared(task[0], None, reason)


def _path(task: Task) -> str:
    return task[1]


@contextmanager
def local_engine(
    tasks: list[Task], *, workers: int | None = None, address: str | None = None
) -> Iterator[Iterator[Prepared]]:
    """`prepare_file` over `tasks` in processes of this machine; results in task order. A file
    whose worker dies (killed, out of memory) is retried alone, then rejected with the reason."""
    count = resolve_workers(workers)
    chunksize = max(1, min(16, len(tasks) // (4 * count)))
    results = ordered_map(_prepare_task, tasks, workers=count, chunksize=chunksize, died=_died, describe=_path)
    try:
        yield results
    finally:
        results.close()


def select_engine(
    engine: str, address: str | None
) -> Callable[..., AbstractContextManager[Iterator[Prepared]]]:
    """The engine that maps `prepare_file` over the tasks, in order (see `ENGINES`)."""
    entry = ENGINES[engine]
    if address is not None and not entry.caps.address:
        raise OptionError(f"--address {address} needs --engine {' or '.join(ENGINES.having('address'))}")
    chosen: Callable[..., AbstractContextManager[Iterator[Prepared]]] = entry.load()
    return chosen
