"""An ordered process map that notices dying workers instead of waiting for them forever.

Items go out in chunks, one chunk per worker at a time, so the map knows which items a
worker held when it died (killed, out of memory). Those items are retried one by one in
fresh workers; an item that kills its worker alone becomes `died(item, reason)`. When
workers keep dying without finishing anything, the map raises WorkerError. Results come
back in item order, at most `window` items ahead of the consumer.
"""
from __future__ import annotations

import signal
import traceback
from collections import deque
from collections.abc import Callable, Generator, Sequence
from dataclasses import dataclass
from multiprocessing.connection import Connection, wait
from multiprocessing.process import BaseProcess
from typing import Any, TypeVar

from ..errors import WorkerError, add_note
from ..runtime.processes import next_message, safe_context

T = TypeVar("T")
R = TypeVar("R")
JOIN_SECONDS = 5.0


def _worker_main(func: Callable[[Any], Any], conn: Connection) -> None:
    """Apply `func` to each item of each chunk received; report results or the failing position."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent handles Ctrl-C and stops us
    while True:
        chunk = next_message(conn)
        if chunk is None:  # stop, or the parent is gone
            return
        results = []
        for position, item in enumerate(chunk):
            try:
                results.append(func(item))
            except Exception as exc:  # noqa: BLE001 - reported to the parent, which raises it
                conn.send(("error", position, f"{type(exc).__name__}: {exc}", traceback.format_exc()))
                break
        else:
            conn.send(("ok", results))


@dataclass
class _Worker:
    process: BaseProcess
    conn: Connection
    held: list[int] | None = None  # positions of the chunk being worked on


def _death(process: BaseProcess) -> str:
    """How a worker process ended: `signal SIGKILL` or `exit status N`."""
    process.join(JOIN_SECONDS)
    code = process.exitcode
    if code is not None and code < 0:
        return f"signal {signal.Signals(-code).name}"
    return f"exit status {code}"


def ordered_map(
    func: Callable[[T], R], items: Sequence[T], *, workers: int, chunksize: int,
    died: Callable[[T, str], R], describe: Callable[[T], str] = str, window: int | None = None,
) -> Generator[R, None, None]:
    """`func(item)` for each item in `workers` processes, yielded in order (see the module)."""
    ctx = safe_context()
    window = window or workers * chunksize * 4
    todo = deque(list(range(i, min(i + chunksize, len(items)))) for i in range(0, len(items), chunksize))
    alone: deque[int] = deque()  # positions to retry one by one
    done: dict[int, R] = {}
    pool: list[_Worker] = []
    deaths_in_a_row, position = 0, 0

    def start() -> _Worker:
        parent, child = ctx.Pipe()
        process = ctx.Process(target=_worker_main, args=(func, child), daemon=True)
        process.start()
        child.close()
        return _Worker(process, parent)

    try:
        pool = [start() for _ in range(min(workers, len(todo)))]
        while position < len(items):
            while position in done:
                yield done.pop(position)
                position += 1
            if position >= len(items):
                break
            for worker in pool:
                if worker.held is None and (alone or (todo and todo[0][0] < position + window)):
                    worker.held = [alone.popleft()] if alone else todo.popleft()
                    try:
                        worker.conn.send([items[i] for i in worker.held])
                    except OSError:
                        pass  # died while idle: its sentinel is ready and the chunk is retried
            busy = [w for w in pool if w.held is not None]
            ready = set(wait([w.conn for w in busy] + [w.process.sentinel for w in busy]))
            for k, worker in enumerate(pool):
                if worker.conn not in ready and worker.process.sentinel not in ready:
                    continue
                try:
                    report = worker.conn.recv()
                except (EOFError, OSError):
                    reason = _death(worker.process)
                    deaths_in_a_row += 1
                    if deaths_in_a_row > 2 * workers + 2:
                        raise WorkerError(f"preprocess workers keep dying ({reason}, {deaths_in_a_row} in a row "
                                          "without finishing a file): check memory limits and dmesg") from None
                    held = worker.held or []
                    if len(held) == 1:
                        hint = ": out of memory?" if reason == "signal SIGKILL" else ""
                        done[held[0]] = died(items[held[0]], f"worker died ({reason}) while preparing this file{hint}")
                    else:
                        alone.extend(held)
                    worker.conn.close()
                    pool[k] = start()
                    continue
                assert worker.held is not None  # only busy workers are waited on
                if report[0] == "error":
                    _, at, message, text = report
                    error = WorkerError(f"preprocess worker failed on {describe(items[worker.held[at]])}: {message}")
                    add_note(error, text)
                    raise error
                done.update(zip(worker.held, report[1]))
                worker.held, deaths_in_a_row = None, 0
    finally:
        _stop(pool)


def _stop(pool: list[_Worker]) -> None:
    """End every worker: idle ones are told to exit, busy ones terminated; none outlives the map."""
    for worker in pool:
        try:
            if worker.held is None:
                worker.conn.send(None)
            else:
                worker.process.terminate()
        except (OSError, ValueError):
            worker.process.terminate()
    for worker in pool:
        worker.process.join(JOIN_SECONDS)
        if worker.process.is_alive():
            worker.process.kill()
            worker.process.join(JOIN_SECONDS)
        worker.conn.close()
