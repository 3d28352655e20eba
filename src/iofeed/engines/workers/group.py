"""The `workers` engine's processes as one group: started, grown or retired, sent tasks (least busy
first), answered, watched; a dead or stuck one raised as a `WorkerError` naming what it was doing.

The engine (`engine.py`) decides which batch goes to which slot and when; this group only runs
what it is sent. Kept apart because the two change for different reasons: the order of a pass
(the next epoch begun early, spares, autotuning) against processes and their failures."""
from __future__ import annotations

import contextlib
import signal
import weakref
from collections.abc import Callable
from multiprocessing.connection import Connection, wait
from typing import Any

from ...augment.tokenizer import SampleTokenizer
from ...augment.transforms import SampleTransform
from ...errors import LoaderStateError, WorkerError
from ...runtime.processes import safe_context
from ...sources.samples import SampleSource, shrunk_shards
from .memory import SharedBlock
from .process import WorkerProcess, death, start_error
from .slots import Layout
from .task import Done, Task, worker_main
from .watchdog import Watchdog
from .worker_status import TRANSFORMING, WorkerStatus


class WorkerGroup:
    """The worker processes of one engine. `closed` is set by the engine's `close()` (from any
    thread); a dead or stuck worker calls `stop_engine` (the engine's `close()`, a bound method
    held weakly: the group keeps no engine alive, so a dropped loader is freed at once) before raising."""

    def __init__(self, source: SampleSource, layout: Layout, augment: Any, on_error: str,
                 transform: SampleTransform | None, stall: tuple[float, float],
                 stop_engine: Callable[[], None], tokenizer: SampleTokenizer | None = None) -> None:
        self._source, self._layout, self._augment, self._on_error = source, layout, augment, on_error
        self._tokenizer = tokenizer  # Output(tokenizer=), run by each worker
        self._transform, self._stop_engine = transform, weakref.WeakMethod(stop_engine)
        self._watchdog = Watchdog(source, None if transform is None else transform.name, stall)
        self._blocks: tuple[SharedBlock, SharedBlock] | None = None  # the slots, and the stale-generation mark
        self.members: list[WorkerProcess] = []  # the list shutdown() stops at close (see the engine's finalizer)
        self.closed = False

    def start(self, block: SharedBlock, stale: SharedBlock, count: int) -> None:
        """Start `count` workers on the engine's slots `block` and its stale-generation mark `stale`."""
        self._blocks = (block, stale)
        for _ in range(count):
            self._add()

    @property
    def active(self) -> int:
        """Workers taking new tasks (not retiring)."""
        return sum(not w.retiring for w in self.members)

    @property
    def busy(self) -> bool:
        """Whether any worker holds a task it has not answered."""
        return any(w.busy for w in self.members)

    def processes(self) -> list[Any]:
        """The live worker processes."""
        return [w.proc for w in self.members]

    def _add(self) -> None:
        assert self._blocks is not None, "start() first"
        ctx = safe_context()
        try:
            mine, theirs = ctx.Pipe(duplex=True)
            progress = WorkerStatus()
            proc = ctx.Process(
                target=worker_main,
                args=(*self._blocks, self._layout, self._source, self._augment, self._on_error, theirs,
                      self._transform, progress.block, self._tokenizer),
                daemon=True,
            )
            proc.start()
            progress.sent()
        except (OSError, EOFError) as exc:  # a limit of the machine, not a bug: say which
            raise start_error(exc, len(self.members)) from None
        theirs.close()
        self.members.append(WorkerProcess(proc, mine, progress))

    def resize(self, count: int) -> None:
        """Grow to `count` workers at once, or retire the surplus as they become idle."""
        active = [w for w in self.members if not w.retiring]
        for _ in range(count - len(active)):
            self._add()
        for worker in active[count:]:
            worker.retiring = True
            self._retire_if_idle(worker)

    def _retire_if_idle(self, worker: WorkerProcess) -> None:
        if worker.retiring and worker.busy == 0:
            with contextlib.suppress(OSError):  # a retiring worker that died needs no goodbye
                worker.conn.send(None)
            worker.conn.close()
            self.members.remove(worker)
            self._watchdog.forget(worker.progress)
            worker.proc.join(timeout=5.0)

    def send(self, task: Task) -> None:
        """Give `task` to the least busy worker that is not retiring."""
        worker = min((w for w in self.members if not w.retiring), key=lambda w: w.busy)
        try:
            worker.conn.send(task)
        except OSError:  # its end of the pipe is gone: it died since the last receive
            self._raise_dead(worker)
        if worker.busy == 0:
            self._watchdog.started(worker.progress)  # the time it may take starts now
        worker.busy += 1
        worker.sent += 1

    def receive(self) -> Done:
        """The next finished task; raises WorkerError as soon as a worker dies."""
        while True:
            if self.closed:
                raise LoaderStateError.closed()
            by_handle = {w.conn: w for w in self.members} | {w.proc.sentinel: w for w in self.members}
            try:
                self._watch()
                ready = wait(list(by_handle), timeout=self._watchdog.poll_seconds)
            except (OSError, ValueError):  # a pipe closed by close() on another thread
                if self.closed:
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

    def drain(self) -> int:
        """Wait for the tasks of an abandoned pass (told to stop early), so that their slots can be
        reused; the number of them the workers left undone."""
        stopped = 0
        while self.busy:
            stopped += self.receive().stale
        return stopped

    def _watch(self) -> None:
        """Warn about busy workers that made no progress for a while; past the bound, stop and raise."""
        try:
            self._watchdog.check([(w.progress, w.proc.pid, f"worker {k}", w.sent)
                                  for k, w in enumerate(self.members) if w.busy])
        except WorkerError:
            self._stop()
            raise

    def _stop(self) -> None:
        stop = self._stop_engine()
        if stop is not None:
            stop()

    def _raise_dead(self, worker: WorkerProcess) -> None:
        if self.closed:  # stopped by close() from another thread, not dead
            raise LoaderStateError.closed()
        proc = worker.proc
        proc.join(timeout=1.0)
        code = proc.exitcode if proc.exitcode is not None else 0
        transform = self._transform.name if self._transform is not None else None
        doing = worker.progress.describe(self._source, transform)
        in_transform = worker.progress.stage() == TRANSFORMING
        self._stop()
        shrunk = shrunk_shards(self._source) if code == -signal.SIGBUS else []
        cause = (f": {shrunk[0]}{f' (and {len(shrunk) - 1} more)' if len(shrunk) > 1 else ''}; a shard was "
                 "truncated while the loader read it (run `iofeed preprocess` again, not while it is read)"
                 if shrunk else "")
        raise WorkerError(f"loader worker (pid {proc.pid}) {death(code, doing, in_transform and not shrunk)}{cause}")
