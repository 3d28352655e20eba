"""Process pools started safely: forkserver (or spawn), never a bare fork after CUDA or DALI."""
from __future__ import annotations

import importlib.util
import multiprocessing as mp
import os
from multiprocessing.context import BaseContext
from multiprocessing.pool import Pool

from .errors import OptionError


def safe_context() -> BaseContext:
    """forkserver where the platform has it, else spawn.

    The fork server imports the loader's worker code (and torch, when installed) once, so
    that each worker starts in milliseconds instead of importing them again. The server is a
    fresh process: nothing CUDA or DALI started in the caller is forked.
    """
    if "forkserver" not in mp.get_all_start_methods():
        return mp.get_context("spawn")
    ctx = mp.get_context("forkserver")
    preload = ["iofeed.backends.workers.engine"]
    if importlib.util.find_spec("torch") is not None:
        preload.append("torch")
    ctx.set_forkserver_preload(preload)
    return ctx


def resolve_workers(workers: int | None) -> int:
    """`None` → all cores; otherwise a positive count."""
    if workers is None:
        return max(1, os.cpu_count() or 1)
    if workers < 1:
        raise OptionError(f"workers must be >= 1, got {workers}")
    return workers


def worker_pool(workers: int | None) -> Pool:
    """A process pool of `workers` processes (all cores by default), safe to use after CUDA."""
    return safe_context().Pool(resolve_workers(workers))
