"""One worker process of the `workers` engine: its record, why it could not start, how its death
is worded, and the shutdown of them all."""
from __future__ import annotations

import errno
import signal
from dataclasses import dataclass
from multiprocessing.connection import Connection
from typing import Any

from ...errors import StartError, memory_limit_note
from .memory import SharedBlock
from .worker_status import WorkerStatus


@dataclass
class WorkerProcess:
    """One worker process, its pipe, and the tasks it has not answered yet."""

    proc: Any
    conn: Connection
    progress: WorkerStatus  # which sample and step it is on, and how far it got
    busy: int = 0
    sent: int = 0  # tasks sent to it, ever
    retiring: bool = False


LIMITS: dict[int | None, str] = {  # keyed by OSError.errno, which may be None
    errno.EMFILE: "raise the open-file limit, e.g. `ulimit -n 4096`",
    errno.ENFILE: "the system's open-file table is full",
    errno.EAGAIN: "the process limit (`ulimit -u`, the container's pids limit) is reached: lower workers",
    errno.ENOMEM: "out of memory: lower workers or batch_size",
}


def start_error(exc: OSError | EOFError, running: int) -> StartError:
    """The error for a worker that could not start (`running` others were): which limit of the machine."""
    cause = (f"{exc.strerror} ({LIMITS.get(exc.errno, 'a limit of this machine')})" if isinstance(exc, OSError)
             else "the fork server that starts workers ended (out of open files or processes? check "
                  "`ulimit -n` and `ulimit -u`)")
    return StartError(f"cannot start a loader worker: {cause}; {running} worker(s) were running")


def death(code: int, doing: str, in_transform: bool) -> str:
    """How a worker with exit status `code` died `doing` (' while ... sample X'), and what to do."""
    if code == -signal.SIGKILL:
        return (f"was killed (SIGKILL){doing}: if the system ran out of memory, lower workers or batch_size"
                f"{memory_limit_note()}")
    if code < 0:
        culprit = ": the crash is in the transform or a library it calls" if in_transform else ""
        return f"died with signal {signal.Signals(-code).name}{doing}{culprit}{memory_limit_note()}"
    if in_transform:
        return (f"exited with status {code}{doing}: the transform ended its worker (os._exit or sys.exit; nothing "
                "is printed): a transform must return the image or raise an exception")
    if code == 1:  # an exception outside any sample: multiprocessing printed its traceback
        return f"exited with status 1{doing}: its traceback is printed above (stderr)"
    return f"exited with status {code}{doing}: something in it called os._exit or sys.exit (nothing is printed)"


def shutdown(workers: list[WorkerProcess], blocks: tuple[SharedBlock, ...]) -> None:
    """Stop workers (politely, then by force) and give up the shared blocks (views keep their memory)."""
    for worker in workers:
        try:
            worker.conn.send(None)
        except (OSError, ValueError):
            pass
    for worker in workers:
        worker.proc.join(timeout=1.0)
        if worker.proc.is_alive():
            worker.proc.kill()
            worker.proc.join(timeout=1.0)
        worker.conn.close()
        worker.progress.close()
    for block in blocks:
        block.release()
