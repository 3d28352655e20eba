"""Dataset files opened safely: regular files only (a FIFO or a device named like a dataset file
would block its reader for ever), a descriptor limit reported as one, naming the file; and whether
the lock file of a run or a download is still held by a live process."""
from __future__ import annotations

import errno
import fcntl
import os
import resource
import stat
from collections.abc import Iterator
from contextlib import contextmanager

from ..errors import DatasetError, SourceError

_NO_DESCRIPTORS = (errno.EMFILE, errno.ENFILE)


def lock_free(path: str | os.PathLike[str]) -> bool | None:
    """Whether no process holds an flock on the file at `path` (its holder died, or finished):
    True or False, None when there is no such file. Other OSErrors as they come."""
    with try_lock(path) as held:
        return held


@contextmanager
def try_lock(path: str | os.PathLike[str]) -> Iterator[bool | None]:
    """Take the flock on the file at `path` without waiting, and hold it for the block: yields True
    when taken, False when another process holds it, None when there is no such file."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except FileNotFoundError:
        yield None
        return
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            yield False
            return
        yield True
    finally:
        os.close(fd)  # closing drops the lock


def open_regular(path: str | bytes | os.PathLike[str]) -> int:
    """A read-only descriptor of the regular file at `path`. DatasetError when it is anything else
    (opened without blocking, so a FIFO is refused rather than waited on); SourceError when the
    process is out of file descriptors; other OSErrors as they come."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as exc:
        raise descriptor_error(exc, path) from None
    try:
        _check_regular(path, os.fstat(fd))
        os.set_blocking(fd, True)
    except BaseException:
        os.close(fd)
        raise
    return fd


def regular_stat(path: str | bytes | os.PathLike[str]) -> os.stat_result:
    """`os.stat(path)` of a regular file (one call, no open: cheap for thousands of shards on a
    network file system); DatasetError for anything else."""
    return _check_regular(path, os.stat(path))


def _check_regular(path: str | bytes | os.PathLike[str], info: os.stat_result) -> os.stat_result:
    if not stat.S_ISREG(info.st_mode):
        raise DatasetError(f"{os.fsdecode(path)} is not a regular file ({_kind(info.st_mode)}): a dataset file must "
                           "be one (run `iofeed preprocess` again)")
    return info


def read_regular(path: str | os.PathLike[str]) -> bytes:
    """The bytes of the regular file at `path` (see `open_regular`)."""
    with os.fdopen(open_regular(path), "rb") as f:
        return f.read()


def descriptor_error(exc: OSError, path: str | bytes | os.PathLike[str]) -> OSError | SourceError:
    """`exc` from opening `path`, or for a process out of descriptors (EMFILE, ENFILE) a SourceError
    naming the file and the limit to raise."""
    if exc.errno not in _NO_DESCRIPTORS:
        return exc
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    which = "this process's limit" if exc.errno == errno.EMFILE else "the system's limit"
    return SourceError(f"cannot open {os.fsdecode(path)}: too many open files ({which}; `ulimit -n` is {soft}): "
                       "raise it, e.g. `ulimit -n 4096`, or use fewer workers")


def raise_open_limit(wanted: int) -> None:
    """Raise this process's soft open-file limit towards `wanted`, within the hard limit (which needs
    no privilege): a worker keeps every shard it reads open, and a soft limit of 1024 is common."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = wanted if hard == resource.RLIM_INFINITY else min(wanted, hard)
    if soft != resource.RLIM_INFINITY and target > soft:
        resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))


def _kind(mode: int) -> str:
    for test, name in ((stat.S_ISFIFO, "a FIFO"), (stat.S_ISDIR, "a directory"), (stat.S_ISCHR, "a character device"),
                       (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket")):
        if test(mode):
            return name
    return "not a regular file"
