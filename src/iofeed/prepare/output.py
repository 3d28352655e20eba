"""A local output directory: guarded, locked for the run, written aside and swapped in atomically.

The steps, each reusable by other outputs: `check_output` refuses an OUT whose replacement
would destroy sources or a folder that is not an iofeed dataset; `lock_output` holds an
`fcntl.flock` on `.OUT.lock` beside OUT for the whole run (two runs, even with one PID in two
containers, cannot interleave); `staging_dir` clears what dead runs left and makes
`.OUT.partial-PID`; `swap_in` renames the old dataset aside, the new one in, then deletes the
old one, with SIGINT and SIGTERM held off during the two renames. `written_aside` runs them in
that order around the block that writes the dataset.
"""
from __future__ import annotations

import errno
import fcntl
import os
import shutil
import signal
import tempfile
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from ..errors import DatasetError, IofeedError, OptionError
from ..format.files import lock_free
from ..format.manifest import MANIFEST_NAME, Manifest, written_files
from ..sources.folder_scan import linked_class_folders

PARTIAL = ".partial-"  # `.OUT.partial-PID`: the dataset being written
SPOOL = ".spool-"  # `.OUT.spool-PID-*`: bytes a source copied out (Parquet cells, remote shards)
SPOOL_LOCK = ".lock"  # in a spool folder: flock'd by the run using it
ASIDE = ".replaced-"  # `.OUT.replaced-PID`: the old dataset between the two renames of a swap



class OutputError(IofeedError):
    """The output directory cannot be written or is held by another run."""


def check_output(src: Path | str | None, out: Path, overwrite: bool) -> None:
    """Refuse an `out` that is, contains or lies inside `src` (None: nothing is scanned), is or
    contains the current directory, exists without `overwrite`, or is not an iofeed dataset to
    overwrite."""
    out_r, cwd = Path(out).resolve(), Path.cwd().resolve()
    # a class folder linked in from elsewhere is read as part of the source too
    read = [(Path(src).resolve(), src), *linked_class_folders(src)] if src is not None else []
    for src_r, shown in read:
        if out_r == src_r or out_r in src_r.parents or src_r in out_r.parents:
            raise OptionError(f"output {out} overlaps the source folder {shown} (its files would be lost "
                              "or read as a class): pick an -o outside SRC")
    if out_r == cwd or out_r in cwd.parents:
        raise OptionError(f"output {out} is or contains the current directory: pick another -o")
    if not os.path.lexists(out):
        return
    if not overwrite:
        raise OptionError(f"output already exists: {out} (pass --overwrite to replace it)")
    if Path(out).is_symlink() or not Path(out).is_dir():
        raise OptionError(f"output {out} is not a directory: --overwrite replaces only an iofeed dataset "
                          "(remove it yourself or pick another -o)")
    if not (Path(out) / MANIFEST_NAME).is_file():
        raise OptionError(f"output {out} is not an iofeed dataset (no {MANIFEST_NAME}): --overwrite replaces "
                          "only an iofeed dataset (remove it yourself or pick another -o)")
    try:
        ours = written_files(Manifest.read(Path(out)))
    except DatasetError as exc:
        raise OptionError(f"output {out}: {exc}; --overwrite replaces only the files a readable manifest lists "
                          "(remove it yourself or pick another -o)") from None
    foreign = sorted(e.name for e in os.scandir(out) if not e.is_file(follow_symlinks=False) or e.name not in ours)
    if foreign:
        raise OptionError(f"output {out} holds {', '.join(foreign[:3])}{', ...' if len(foreign) > 3 else ''}, which "
                          "iofeed did not write: --overwrite would delete it with the dataset (move it out first)")


def lock_path(out: Path) -> Path:
    """The lock file of `out`: `.OUT.lock` beside it."""
    return Path(out).parent / f".{Path(out).name}.lock"


@contextmanager
def lock_output(out: Path) -> Iterator[None]:
    """Hold an exclusive `flock` on `.OUT.lock` for the block; OutputError if another run holds it.

    The lock file is removed on release. A locker checks after locking that the file it holds
    is still the one at the path (a releasing run may have removed it meanwhile) and retries.
    """
    path = lock_path(out)
    while True:
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        except OSError as exc:
            raise output_error(exc, out) from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise OutputError(f"another iofeed run is writing {out} (it holds {path}): wait for it to "
                              "finish or stop it") from None
        try:
            same = os.stat(path).st_ino == os.fstat(fd).st_ino
        except FileNotFoundError:
            same = False
        if same:
            break
        os.close(fd)
    try:
        yield
    finally:
        path.unlink(missing_ok=True)
        os.close(fd)


@contextmanager
def spool_dir(out: Path) -> Iterator[str]:
    """A private temporary folder beside `out` (`.OUT.spool-PID-*`) for bytes a source copies out,
    held by an `flock` on its `.lock` for the block and removed when it ends. Spools of runs no
    longer alive (killed) are removed first: those whose lock nobody holds (a run in another PID
    namespace on shared storage holds its own), or without a lock whose PID is not alive here.
    OutputError when it cannot be made there."""
    out = Path(out)
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        for old in out.parent.glob(f".{out.name}{SPOOL}*"):
            if _abandoned(old, old.name[len(out.name) + len(SPOOL) + 1:].split("-")[0]):
                shutil.rmtree(old, ignore_errors=True)
        folder = tempfile.mkdtemp(prefix=f".{out.name}{SPOOL}{os.getpid()}-", dir=out.parent)
        fd = os.open(os.path.join(folder, SPOOL_LOCK), os.O_RDWR | os.O_CREAT, 0o644)
        fcntl.flock(fd, fcntl.LOCK_EX)
    except OSError as exc:
        raise output_error(exc, out) from None
    try:
        yield folder
    finally:
        shutil.rmtree(folder, ignore_errors=True)
        os.close(fd)


def _abandoned(spool: Path, pid: str) -> bool:
    """Whether the spool folder `spool` (of process `pid`) belongs to no live run."""
    try:
        free = lock_free(spool / SPOOL_LOCK)
    except OSError:  # not a folder, or not ours to open: left alone
        return False
    if free is None:  # a spool of an older iofeed, or one being made this instant
        return pid.isdigit() and not _alive(int(pid))
    return free


def _alive(pid: int) -> bool:
    """Whether process `pid` exists (on this machine, in this PID namespace)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def staging_dir(out: Path) -> tuple[Path, list[Path]]:
    """A fresh `.OUT.partial-PID` beside `out`, and what dead runs left there (removed).

    Call with the lock held: every other `.OUT.partial-*` is then a dead run's. An old dataset
    left aside by a swap killed between its renames is renamed back to OUT first.
    """
    out = Path(out)
    leftovers = sorted(out.parent.glob(f".{out.name}{PARTIAL}*")) + sorted(out.parent.glob(f".{out.name}{ASIDE}*"))
    asides = [p for p in leftovers if ASIDE in p.name and (p / MANIFEST_NAME).is_file()]
    if asides and not os.path.lexists(out):
        os.replace(asides[-1], out)
        leftovers.remove(asides[-1])
    for path in leftovers:
        shutil.rmtree(path, ignore_errors=True)
    staging = out.parent / f".{out.name}{PARTIAL}{os.getpid()}"
    staging.mkdir(parents=True)
    return staging, leftovers


def swap_in(staging: Path, out: Path) -> None:
    """Make `staging` the dataset at `out`: old aside, new in, old deleted; never a mix of both."""
    out = Path(out)
    aside = out.parent / f".{out.name}{ASIDE}{os.getpid()}"
    with _signals_held():
        if os.path.lexists(out):
            os.replace(out, aside)
        os.replace(staging, out)
    shutil.rmtree(aside, ignore_errors=True)


def check_inputs(out: Path, inputs: list[str | Path], what: str) -> None:
    """Refuse an `out` holding one of the local files a run reads (a labels file, shards indexed in
    place): `--overwrite` would delete the user's file, and a dataset would point into itself."""
    out_r = Path(out).resolve()
    for path in inputs:
        if out_r == Path(path).resolve() or out_r in Path(path).resolve().parents:
            raise OptionError(f"{what} {path} lies inside the output {out} (replacing it would delete the file): "
                              "move it out, or pick another -o")


@contextmanager
def written_aside(src: Path | str | None, out: Path, overwrite: bool) -> Iterator[tuple[Path, list[Path]]]:
    """Write the dataset at `out` aside: lock OUT, yield a fresh staging folder (and what dead runs
    left, removed), then check OUT again (it may have appeared or changed meanwhile, see
    `check_output`) and swap the staging folder in. The staging folder is removed if the block
    fails; an OSError becomes a one-line OutputError."""
    try:
        with lock_output(out):
            staging, stale = staging_dir(out)
            try:
                yield staging, stale
                check_output(src, out, overwrite)
                swap_in(staging, out)
            except BaseException:
                shutil.rmtree(staging, ignore_errors=True)
                raise
    except OSError as exc:
        raise output_error(exc, out) from None


@contextmanager
def _signals_held() -> Iterator[None]:
    """SIGINT and SIGTERM that arrive during the block take effect when it ends (main thread:
    their Python handlers are swapped for recorders, whichever thread the kernel picks)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    arrived: list[int] = []
    previous = {sig: signal.signal(sig, lambda signum, frame: arrived.append(signum))
                for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, signal.SIG_DFL if handler is None else handler)
        for signum in arrived:
            signal.raise_signal(signum)


@contextmanager
def terminate_as_interrupt() -> Iterator[None]:
    """SIGTERM raises KeyboardInterrupt in the main thread for the block, so it cleans up as Ctrl-C does."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def interrupt(signum: int, frame: object) -> None:
        raise KeyboardInterrupt(f"signal {signal.Signals(signum).name}")

    previous = signal.signal(signal.SIGTERM, interrupt)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def output_error(exc: OSError, out: Path) -> OutputError:
    """A one-line error for an OSError met while writing `out`, with what to do."""
    advice_by_errno: dict[int | None, str] = {  # None: an OSError raised without an errno
        errno.ENOSPC: "free some space or pick another -o",
        errno.EDQUOT: "free some space or pick another -o",
        errno.EFBIG: "the file system or a size limit (ulimit -f) refused a file: pick another -o",
        errno.EROFS: "the file system is read-only: pick another -o",
        errno.EACCES: "no permission: pick another -o",
        errno.EPERM: "no permission: pick another -o",
    }
    advice = advice_by_errno.get(exc.errno, "pick another -o")
    where = f" ({exc.filename})" if exc.filename else ""
    return OutputError(f"cannot write {out}: {exc.strerror or exc}{where}: {advice}")
