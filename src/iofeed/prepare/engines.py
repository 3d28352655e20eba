"""Preprocess engines: each maps `prepare_file` over the tasks, results in task order."""
from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager

from ..errors import OptionError
from ..parallel import worker_pool
from .file import Prepared, Task, prepare_file

ENGINES = ("local", "ray")


def _prepare_task(task: Task) -> Prepared:
    return prepare_file(*task)


@contextmanager
def local_engine(
    tasks: list[Task], *, workers: int | None = None, address: str | None = None
) -> Iterator[Iterator[Prepared]]:
    """`prepare_file` over `tasks` in a process pool of this machine; results in task order."""
    with worker_pool(workers) as pool:
        yield pool.imap(_prepare_task, tasks, chunksize=16)


def select_engine(
    engine: str, address: str | None
) -> Callable[..., AbstractContextManager[Iterator[Prepared]]]:
    """The engine that maps `prepare_file` over the tasks, in order: `local` or `ray`."""
    if engine not in ENGINES:
        raise OptionError(f"unknown engine {engine!r}: use one of {', '.join(ENGINES)}")
    if address is not None and engine != "ray":
        raise OptionError(f"--address {address} needs --engine ray")
    if engine == "ray":
        from .ray import ray_engine

        return ray_engine
    return local_engine
