"""The worker processes of the `workers` engine: started, grown or retired, sent tasks (least busy
first), answered, watched; a dead one raised as a `WorkerError` naming what it was doing; all of
them stopped and the shared memory freed at close."""
from __future__ import annotations

import contextlib
import signal
import weakref
from multiprocessing.connection import Connection, wait
from typing import Any

from ...augment.transforms import SampleTransform
from ...errors import LoaderStateError, WorkerError
from ...runtime.processes import safe_context
from ...sources.samples import SampleSource, shrunk_shards
from .memory import SharedBlock
from .process import WorkerProcess, death, start_error
from .slots import Layout
from .task import Done, Task, worker_main
from .watchdog import Watchdog
from .worker_status import TRANSFORMING, Progress


class WorkerCrew:
    """The processes side of `WorkerEngine` (its base): the attributes below are the engine's,
    set by its `__init__` and `_start`."""

    layout: Layout
    _source: SampleSource
    _augment: Any
    _on_error: str
    _transform: SampleTransform | None
    _workers: list[WorkerProcess]
    _block: SharedBlock | None
    _stale: SharedBlock | None
    _watchdog: Watchdog
    _finalizer: weakref.finalize[Any, Any] | None
    _closed: bool
    _payload: Any
    _labels: Any
    _stale_below: Any
    stopped_early: int

    def _add_worker(self) -> None:
        ctx = safe_context()
        try:
            mine, theirs = ctx.Pipe(duplex=True)
            progress = Progress()
            proc = ctx.Process(
                target=worker_main,
                args=(self._block, self._stale, self.layout, self._source, self._augment, self._on_error, theirs,
                      self._transform, progress.block),
                daemon=True,
            )
            proc.start()
            progress.sent()
        except (OSError, EOFError) as exc:  # a limit of the machine, not a bug: say which
            raise start_error(exc, len(self._workers)) from None
        theirs.close()
        self._workers.append(WorkerProcess(proc, mine, progress))

    def _resize(self, count: int) -> None:
        """Grow to `count` workers at once, or retire the surplus as they become idle."""
        active = [w for w in self._workers if not w.retiring]
        for _ in range(count - len(active)):
            self._add_worker()
        for worker in active[count:]:
            worker.retiring = True
            self._retire_if_idle(worker)

    def _retire_if_idle(self, worker: WorkerProcess) -> None:
        if worker.retiring and worker.busy == 0:
            with contextlib.suppress(OSError):  # a retiring worker that died needs no goodbye
                worker.conn.send(None)
            worker.conn.close()
            self._workers.remove(worker)
            self._watchdog.forget(worker.progress)
            worker.proc.join(timeout=5.0)

    def _send(self, task: Task) -> None:
        """Give `task` to the least busy worker that is not retiring."""
        worker = min((w for w in self._workers if not w.retiring), key=lambda w: w.busy)
        try:
            worker.conn.send(task)
        except OSError:  # its end of the pipe is gone: it died since the last receive
            self._raise_dead(worker)
        if worker.busy == 0:
            self._watchdog.started(worker.progress)  # the time it may take starts now
        worker.busy += 1
        worker.sent += 1

    def _receive(self) -> Done:
        """The next finished task; raises WorkerError as soon as a worker dies."""
        while True:
            if self._closed:
                raise LoaderStateError.closed()
            by_handle = {w.conn: w for w in self._workers} | {w.proc.sentinel: w for w in self._workers}
            try:
                self._watch()
                ready = wait(list(by_handle), timeout=self._watchdog.poll_seconds)
            except (OSError, ValueError):  # a pipe closed by close() on another thread
                if self._closed:
                    raise LoaderStateError.closed() from None
                raise
            for handle in ready:
                worker = by_handle[handle]
                if isinstance(handle, Connection):
                    try:
                        done: Done = handle.recv()
                    except (EOFError, OSError):
                        continue  # it died: its sentinel says how
                    worker.busy -= 1
                    self._retire_if_idle(worker)
                    return done
                self._raise_dead(worker)

    def _watch(self) -> None:
        """Warn about busy workers that made no progress for a while; past the bound, stop and raise."""
        try:
            self._watchdog.check([(w.progress, w.proc.pid, f"worker {k}", w.sent)
                                  for k, w in enumerate(self._workers) if w.busy])
        except WorkerError:
            self.close()
            raise

    def _raise_dead(self, worker: WorkerProcess) -> None:
        if self._closed:  # stopped by close() from another thread, not dead
            raise LoaderStateError.closed()
        proc = worker.proc
        proc.join(timeout=1.0)
        code = proc.exitcode if proc.exitcode is not None else 0
        transform = self._transform.name if self._transform is not None else None
        doing = worker.progress.describe(self._source, transform)
        in_transform = worker.progress.stage() == TRANSFORMING
        self.close()
        shrunk = shrunk_shards(self._source) if code == -signal.SIGBUS else []
        cause = (f": {shrunk[0]}{f' (and {len(shrunk) - 1} more)' if len(shrunk) > 1 else ''}; a shard was "
                 "truncated while the loader read it (run `iofeed preprocess` again, not while it is read)"
                 if shrunk else "")
        raise WorkerError(f"loader worker (pid {proc.pid}) {death(code, doing, in_transform and not shrunk)}{cause}")

    def _drain(self) -> None:
        """Wait for tasks of an abandoned epoch (told to stop early), so that their slots can be reused."""
        while any(w.busy for w in self._workers):
            self.stopped_early += self._receive().stale

    def close(self) -> None:
        """Stop the workers and free the shared memory (also on garbage collection and exit)."""
        self._closed = True
        if self._finalizer is not None:
            self._payload = self._labels = self._stale_below = None
            self._finalizer()
            self._finalizer = None
