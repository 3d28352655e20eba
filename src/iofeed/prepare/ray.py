"""The `ray` preprocess engine: `prepare_file` spread as Ray Data tasks over a Ray cluster.

The process running `preprocess` keeps everything that decides the dataset: the scan, the
split, the write order and the shard writer. Ray only maps file → `Prepared`, in task order
(`preserve_order`), so the shards do not depend on how many workers or nodes did the work.
Every node must see the source files at the same paths (a shared filesystem) and have iofeed
installed.

Failures: a task whose worker dies (crash, out of memory, lost node) is rerun by Ray
(`max_retries`). An exception while preparing one file does not fail the other files of its
task: that file, and every file of a task that failed on all its attempts, is run again alone
as a Ray task (`max_retries` + `retry_exceptions`) and, failing every time, is rejected with
the exception as its reason, so no file is ever lost.
"""
from __future__ import annotations

import math
import os
import pickle
from collections.abc import Callable, Generator, Iterator
from contextlib import contextmanager
from typing import Any

import numpy as np

from ..errors import IofeedError, require
from ..format.policy import ImagePolicy
from ..runtime.processes import resolve_workers
from .file import Prepared, Span, Task, prepare_file

RETRIES = 3  # Ray reruns of a failed task, before its file is rejected
FILES_PER_TASK = 64  # small enough to balance a cluster, large enough to hide task overhead
FAILED = "failed after retries"

Prepare = Callable[[int, str, ImagePolicy, Span], Prepared]


def _describe(exc: BaseException) -> str:
    """`Type: message` on one line, at most 300 characters."""
    text = " ".join(f"{type(exc).__name__}: {exc}".split())
    return text if len(text) <= 300 else text[:297] + "..."


def _prepare_batch(
    batch: dict[str, np.ndarray], policy: ImagePolicy, prepare: Prepare
) -> dict[str, np.ndarray]:
    """Ray Data UDF: prepare each file of the batch; an exception becomes that row's error."""
    indices = batch["index"].tolist()
    blobs, errors = [], []
    spans = zip(batch["offset"].tolist(), batch["size"].tolist())
    for index, path, span in zip(indices, batch["path"].tolist(), spans):
        try:
            blob, error = pickle.dumps(prepare(index, os.fsdecode(path), policy, span)), ""
        except Exception as exc:  # noqa: BLE001 - retried alone by the driver, then rejected with this reason
            blob, error = b"", _describe(exc)
        blobs.append(blob)
        errors.append(error)
    return {
        "index": np.asarray(indices, dtype=np.int64),
        "prepared": np.asarray(blobs, dtype=object),
        "error": np.asarray(errors, dtype=object),
    }


def _prepare_one(index: int, path: str, policy: ImagePolicy, span: Span, prepare: Prepare) -> Prepared:
    """One file as a plain Ray task: exceptions propagate, so Ray retries them."""
    return prepare(index, path, policy, span)


@contextmanager
def ray_engine(
    tasks: list[Task],
    *,
    workers: int | None = None,
    address: str | None = None,
    prepare: Prepare | None = None,
) -> Iterator[Iterator[Prepared]]:
    """`prepare` (default `prepare_file`) over `tasks` as Ray Data tasks; results in task order.

    Uses the Ray instance this process is already connected to, else connects to `address`
    (or `RAY_ADDRESS`), else starts a local one with `workers` CPUs (default: all cores) and
    stops it at the end. `workers` also caps the number of concurrent tasks on a cluster.
    """
    ray = require("ray", "ray")
    require("ray.data", "ray")
    started = _connect(ray, address, workers)
    results = _results(ray, tasks, workers, prepare or prepare_file)
    try:
        yield results
    finally:
        results.close()
        if started:
            ray.shutdown()


def _connect(ray: Any, address: str | None, workers: int | None) -> bool:
    """Connect to (or start) Ray unless already connected; True when this call did it."""
    if ray.is_initialized():
        return False
    options: dict[str, Any] = {"logging_level": "WARNING"}
    if address is None and not os.environ.get("RAY_ADDRESS"):
        options.update(num_cpus=resolve_workers(workers), include_dashboard=False)
    try:
        ray.init(address=address, **options)
    except (ConnectionError, RuntimeError, ValueError) as exc:
        where = f"at {address}" if address else "(local)"
        raise IofeedError(f"cannot start or reach the Ray cluster {where}: {_describe(exc)}") from None
    return True


def _results(ray: Any, tasks: list[Task], workers: int | None, prepare: Prepare) -> Generator[Prepared, None, None]:
    """Prepared results in task order; missing or failed files are retried alone."""
    if not tasks:
        return
    policy = tasks[0][2]
    items = [{"index": index, "path": os.fsencode(path), "offset": span[0], "size": span[1]}
             for index, path, _, span in tasks]
    ds = ray.data.from_items(items, override_num_blocks=math.ceil(len(items) / FILES_PER_TASK))
    ds = ds.map_batches(
        _prepare_batch,
        batch_size=FILES_PER_TASK,
        batch_format="numpy",
        fn_kwargs={"policy": policy, "prepare": prepare},
        max_retries=RETRIES,
        **({"concurrency": workers} if workers is not None else {}),
    )
    context = ds.context  # this dataset's own copy: the caller's DataContext is left alone
    context.execution_options.preserve_order = True
    context.max_errored_blocks = -1  # a task failed on every attempt: its files are retried alone
    context.enable_progress_bars = False  # preprocess shows its own
    position = {index: k for k, (index, *_) in enumerate(tasks)}
    retry = _RetryAlone(ray, prepare)
    done = 0
    for batch in ds.iter_batches(batch_size=None, batch_format="numpy"):
        for index, blob, error in zip(batch["index"].tolist(), batch["prepared"], batch["error"]):
            k = position[index]
            if k < done:
                raise IofeedError(f"Ray returned file {index} out of order (a bug: please report it)")
            yield from map(retry, tasks[done:k])  # their task failed on every attempt
            yield pickle.loads(blob) if not error else retry(tasks[k])
            done = k + 1
    yield from map(retry, tasks[done:])


class _RetryAlone:
    """Run one file as its own Ray task with retries; a file failing every time is rejected."""

    def __init__(self, ray: Any, prepare: Prepare) -> None:
        self.ray, self.prepare = ray, prepare
        self.remote = ray.remote(max_retries=RETRIES, retry_exceptions=True)(_prepare_one)

    def __call__(self, task: Task) -> Prepared:
        index, path, policy, span = task
        errors = self.ray.exceptions
        try:
            prepared: Prepared = self.ray.get(self.remote.remote(index, path, policy, span, self.prepare))
            return prepared
        except errors.RayTaskError as exc:
            cause = exc.cause if isinstance(getattr(exc, "cause", None), BaseException) else exc
            if isinstance(cause, ImportError):
                raise IofeedError(f"Ray workers cannot run iofeed ({_describe(cause)}): "
                                  "install iofeed on every node of the cluster") from None
            reason = _describe(cause)
        except (errors.WorkerCrashedError, errors.OutOfMemoryError) as exc:
            reason = _describe(exc)
        return Prepared(index, None, f"{FAILED} ({reason}; {RETRIES} Ray retries)")
