"""The node cache's folder: where it is, the marker that makes it iofeed's own, the only files in it
iofeed ever touches, and the default size limit.

The cache deletes what it evicts, so it works only in a folder it owns: an empty (or new) one,
which it marks with a `CACHEDIR.TAG` (the cache-directory tagging convention, so backup tools skip
it too), or one already marked. A non-empty folder without the marker is refused, never cleaned.
Inside it, iofeed touches only names it writes: `<16 hex digits>/<shard>~<tag>` and that name
with `.lock`, `.failed` or `.part-<pid>-<thread>` after it; anything else (a user's `notes/`, a
`draft.txt~`) is neither counted, evicted nor removed.
"""
from __future__ import annotations

import os
import re
import shutil
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from ...errors import OptionError

MARKER = "CACHEDIR.TAG"
MARKER_TEXT = ("Signature: 8a477f597d28d172789f06886806bc55\n"
               "# This folder is iofeed's node-local shard cache (https://bford.info/cachedir/).\n"
               "# iofeed evicts only what it wrote here: <16 hex digits>/<shard>~<tag> and its .lock, .failed\n"
               "# and .part- files. Delete the folder to empty the cache.\n")
PART, LOCK, FAILED = ".part-", ".lock", ".failed"
EVICT_LOCK = ".evict.lock"  # in the cache root
FETCH_LOG = "fetches.jsonl"  # in a dataset folder
DATASET_FOLDER = re.compile(r"[0-9a-f]{16}")
# a file iofeed writes in a dataset folder: a shard's cached name, alone or with a suffix
CACHE_FILE = re.compile(r"(?P<shard>.+~(?:[0-9a-f]{16}|size\d+))"
                        r"(?P<suffix>|\.lock|\.failed(?:-\d+-\d+)?|\.part-\d+-\d+)")
# what older iofeed versions left in a cache root (before the marker), or another process of this node
# is writing into a new one (its probe, its marker written aside): adopted, not refused
_OLD_ROOT_ENTRY = re.compile(r"\.evict\.lock|\.probe-\d+-\d+|[0-9a-f]{16}|(?:upload|bench-cold|bench-warm)-.+"
                             r"|CACHEDIR\.TAG(?:\.\d+-\d+)?")
RESERVE_BYTES = 2 << 30  # the default limit leaves at least this much of the disk free...
RESERVE_SHARE = 0.05  # ...or this share of its free space, whichever is larger


def default_cache_dir() -> Path:
    """`IOFEED_CACHE`, else `$XDG_CACHE_HOME/iofeed`, else `~/.cache/iofeed`."""
    if os.environ.get("IOFEED_CACHE"):
        return Path(os.environ["IOFEED_CACHE"])
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "iofeed"


def _where(cache_dir: str | os.PathLike[str] | None) -> str:
    return ("Cache.dir" if cache_dir is not None
            else "the default cache folder (from IOFEED_CACHE, XDG_CACHE_HOME or HOME)")


def usable_cache_dir(cache_dir: str | os.PathLike[str] | None) -> Path:
    """`cache_dir` (default: `default_cache_dir()`; `~` expanded), created and checked writable; a one-line
    OptionError naming the folder and the fix when it is empty text, a file, read-only or cannot be made."""
    if cache_dir is not None and not str(cache_dir).strip():
        raise OptionError(f"Cache.dir={str(cache_dir)!r} names no folder (it would mean the working directory): "
                          "pass cache=iofeed.Cache(dir=<a folder for the cache>), or None for the default")
    root = (Path(cache_dir) if cache_dir is not None else default_cache_dir()).expanduser()
    probe = root / f".probe-{os.getpid()}-{threading.get_ident()}"
    try:
        root.mkdir(parents=True, exist_ok=True)
        os.close(os.open(probe, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))
        probe.unlink()
    except OSError as exc:
        if isinstance(exc, (FileExistsError, NotADirectoryError)):
            reason = "a file is in the way"
        else:
            reason = exc.strerror or type(exc).__name__
        raise OptionError(f"cannot use {root} as {_where(cache_dir)}: {reason}; pass cache=iofeed.Cache(dir=<a "
                          "writable folder>) or set IOFEED_CACHE") from None
    return root


def is_marked(root: Path) -> bool:
    """Whether `root` carries iofeed's cache marker."""
    try:
        return "iofeed" in (root / MARKER).read_text(encoding="utf-8", errors="replace")
    except OSError:
        return False


def _left_by_old_iofeed(root: Path) -> bool:
    """Whether every entry of `root` is one an iofeed cache made before the marker existed."""
    for entry in os.scandir(root):
        if not _OLD_ROOT_ENTRY.fullmatch(entry.name):
            return False
        if DATASET_FOLDER.fullmatch(entry.name) and entry.is_dir(follow_symlinks=False):
            if any(not (CACHE_FILE.fullmatch(name) or name == FETCH_LOG) for name in os.listdir(entry.path)):
                return False
    return True


def claim_cache_dir(cache_dir: str | os.PathLike[str] | None) -> Path:
    """The usable cache folder (`usable_cache_dir`), marked as iofeed's: an empty folder, or one an
    older iofeed filled, gets the marker; a non-empty folder that is not an iofeed cache is refused
    in one line (the cache deletes what it evicts)."""
    root = usable_cache_dir(cache_dir)
    if is_marked(root):
        return root
    if next(os.scandir(root), None) is not None and not _left_by_old_iofeed(root):
        fix = ("pass cache=iofeed.Cache(dir=<a new or empty folder>)" if cache_dir is not None
               else "set IOFEED_CACHE=<a new or empty folder>")
        raise OptionError(f"{_where(cache_dir)} {root} is not empty and is not an iofeed cache (no {MARKER} from "
                          f"iofeed), and the cache deletes the shards it evicts: {fix}, e.g. {root / 'iofeed-cache'}")
    aside = root / f"{MARKER}.{os.getpid()}-{threading.get_ident()}"
    try:
        aside.write_text(MARKER_TEXT, encoding="utf-8")
        os.replace(aside, root / MARKER)
    except OSError as exc:
        aside.unlink(missing_ok=True)
        raise OptionError(f"cannot use {root} as {_where(cache_dir)}: writing {MARKER} failed "
                          f"({exc.strerror or type(exc).__name__}); pass cache=iofeed.Cache(dir=<a writable "
                          "folder>)") from None
    return root


def entries(root: Path) -> Iterator[tuple[str, str, os.stat_result]]:
    """(name, path, stat) of every file iofeed wrote in the dataset folders of the cache root (see
    `CACHE_FILE`); files that other processes delete meanwhile are left out, and nothing else is seen."""
    if not root.is_dir():
        return
    for folder in os.scandir(root):
        if not (DATASET_FOLDER.fullmatch(folder.name) and folder.is_dir(follow_symlinks=False)):
            continue
        for entry in os.scandir(folder.path):
            if not CACHE_FILE.fullmatch(entry.name):
                continue
            try:
                yield entry.name, entry.path, entry.stat(follow_symlinks=False)
            except FileNotFoundError:
                continue


def is_shard(name: str) -> bool:
    """Whether a cache file name (from `entries`) is a shard's cached copy (not a lock, note or part)."""
    match = CACHE_FILE.fullmatch(name)
    return match is not None and match["suffix"] == ""


def is_part(name: str) -> bool:
    """Whether a cache file name (from `entries`) is a download in progress."""
    match = CACHE_FILE.fullmatch(name)
    return match is not None and match["suffix"].startswith(PART)


def cache_usage(root: Path) -> int:
    """Bytes held by the cache: verified shards and downloads in progress (counted at full size)."""
    return sum(stat.st_size for name, _, stat in entries(root) if is_shard(name) or is_part(name))


def disk_reserve(free: int) -> int:
    """The free disk the default limit leaves: `RESERVE_BYTES`, or `RESERVE_SHARE` of `free` when larger."""
    return max(RESERVE_BYTES, int(free * RESERVE_SHARE))


def resolve_limit(root: Path, limit: int | None,
                  disk_usage: Callable[[Path], Any] = shutil.disk_usage) -> int:
    """`limit`, or by default what the cache holds now plus the free disk above `disk_reserve` (at
    least 1 byte: a disk with less free than the reserve is refused by the order's check, by name)."""
    if limit is not None:
        if limit < 1:
            raise OptionError(f"cache_limit must be a positive number of bytes, got {limit}")
        return int(limit)
    free = disk_usage(root).free
    return int(max(cache_usage(root) + free - disk_reserve(free), 1))
