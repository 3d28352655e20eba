"""Process start for iofeed's own workers: forkserver (or spawn), never a bare fork after CUDA
or DALI, and never a re-run of the caller's `__main__` module."""
from __future__ import annotations

import importlib.util
import multiprocessing as mp
import sys
import threading
import types
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from multiprocessing.context import SpawnContext, SpawnProcess
from multiprocessing.pool import Pool
from multiprocessing.process import BaseProcess
from typing import Any, TypeAlias

from ..errors import OptionError, StartError
from .system import usable_cores

if sys.platform != "win32":
    from multiprocessing.context import ForkServerContext, ForkServerProcess

    SafeContext: TypeAlias = "ForkServerContext | SpawnContext"  # what `safe_context()` returns
else:
    SafeContext: TypeAlias = SpawnContext

_METHOD = "forkserver" if "forkserver" in mp.get_all_start_methods() else "spawn"
_BARE_MAIN = types.ModuleType("__main__")  # no __file__, no __spec__: nothing for a child to re-import
_SWAP = threading.Lock()


@contextmanager
def _main_hidden() -> Iterator[None]:
    """`sys.modules["__main__"]` is a bare module while a process starts.

    multiprocessing tells a forkserver or spawn child to re-run the parent's main script (by
    its `__file__`, or its module name under `python -m`) before it unpickles its target. iofeed's
    targets live in iofeed, so the child never needs it; and re-running a script written without
    `if __name__ == "__main__":` (most training scripts, `python - < train.py`) would build
    another loader inside the worker.
    """
    if getattr(mp.current_process(), "_inheriting", False):
        raise StartError(
            "iofeed cannot start worker processes while this process is itself starting up as a "
            "multiprocessing child that re-runs your script: put the script's top-level code under "
            "`if __name__ == \"__main__\":`"
        )
    with _SWAP:
        main = sys.modules.get("__main__")
        sys.modules["__main__"] = _BARE_MAIN
        try:
            yield
        finally:
            if main is not None:
                sys.modules["__main__"] = main


class _MainlessStart(BaseProcess):
    """Mixed in before a forkserver or spawn process class: it starts without the caller's `__main__`
    (the public `start()` is wrapped, so the class is typed: docs/decisions/0150)."""

    def start(self) -> None:
        with _main_hidden():
            super().start()


class _MainlessSpawnProcess(_MainlessStart, SpawnProcess):
    """A spawn process started without the caller's `__main__`."""


class _MainlessSpawnContext(SpawnContext):
    Process = _MainlessSpawnProcess


if sys.platform != "win32":
    class _MainlessForkServerProcess(_MainlessStart, ForkServerProcess):
        """A forkserver process started without the caller's `__main__`."""

    class _MainlessForkServerContext(ForkServerContext):
        Process = _MainlessForkServerProcess


def _mainless_context() -> SafeContext:
    """The context for `_METHOD`, its processes started with `__main__` hidden."""
    if sys.platform != "win32" and _METHOD == "forkserver":  # forkserver exists only off Windows
        return _MainlessForkServerContext()
    return _MainlessSpawnContext()


_CONTEXT = _mainless_context()


def safe_context() -> SafeContext:
    """The context iofeed starts its processes with (`Process`, `Pool`, `ProcessPoolExecutor(mp_context=)`).

    forkserver where the platform has it, else spawn: nothing CUDA or DALI started in the caller
    is forked. The fork server imports the loader's worker code (and torch, when installed) once,
    so that each worker starts in milliseconds. Children do not re-run the caller's `__main__`,
    so a script without a `__main__` guard, stdin, `-c`, the prompt and notebooks all work;
    in exchange, targets and initializers must live in importable modules (iofeed's own), not
    in `__main__`.
    """
    if _METHOD == "forkserver":
        preload = ["iofeed.engines.workers.engine"]
        if importlib.util.find_spec("torch") is not None:
            preload.append("torch")
        _CONTEXT.set_forkserver_preload(preload)
    return _CONTEXT


WORKERS_PER_CORE = 2  # the most processes per usable core: more only add memory and switching


def resolve_workers(workers: int | None) -> int:
    """`None` → the usable cores (`system.usable_cores`); otherwise a positive count, capped at
    `WORKERS_PER_CORE` per usable core with a warning (far more only add memory and start-up
    time: docs/decisions/0070-processes-caps-workers-at-workers-per-core.md; two per core still hides I/O waits,
    as `iofeed doctor` advises)."""
    if workers is None:
        return usable_cores().amount
    if workers < 1:
        raise OptionError(f"workers must be >= 1, got {workers}")
    cores = usable_cores()
    cap = WORKERS_PER_CORE * cores.amount
    if workers > cap:
        warnings.warn(f"workers={workers} is more than {WORKERS_PER_CORE} per usable core ({cores.amount}: "
                      f"{cores.because}): using {cap}", RuntimeWarning, stacklevel=1)
        return cap
    return workers


def worker_pool(workers: int | None) -> Pool:
    """A process pool of `workers` processes (the usable cores by default), safe to use after CUDA."""
    return safe_context().Pool(resolve_workers(workers))


def next_message(conn: Any) -> Any:
    """A worker's next message from its parent: None when the parent said stop (None) or is gone."""
    try:
        return conn.recv()
    except (EOFError, OSError):
        return None
