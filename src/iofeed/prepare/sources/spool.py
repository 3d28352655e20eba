"""The spool's room: how many bytes a source may copy into the spool folder beside OUT (a remote
shard fetched, a compressed tar decompressed), and copies that stop past it, leaving nothing."""
from __future__ import annotations

import contextlib
import shutil
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from ...errors import SourceError
from ...sources.remote.cache_dir import RESERVE_BYTES, RESERVE_SHARE, disk_reserve


def spool_room(spool: Path, disk_usage: Callable[[Path], Any] | None = None) -> int:
    """Bytes a copy may take in `spool`: its disk's free space now (earlier copies already taken)
    less a reserve: the node cache's (`disk_reserve`: max(2 GiB, 5%)), but never more than half
    the free space. The reserve keeps room for the dataset written from the copy, about as large
    as the copy itself, so past half the disk it is sized by the copy: a 31 KB archive on a disk
    with 300 MB free is decompressed, a zip bomb still stops with half the disk left."""
    free = (disk_usage or shutil.disk_usage)(spool).free
    return int(max(free - min(disk_reserve(free), free // 2), 0))


def copy_within(pieces: Iterable[bytes | memoryview], target: Path, room: int, name: str, copied: str,
                fix: str | None = None) -> int:
    """Write `pieces` to `target`, at most `room` bytes; the bytes written. SourceError naming the
    shard (`name`, how it is copied: "decompressed", "downloaded") and the bound when it would pass it (a
    huge shard, a zip bomb), or the write's cause when the disk fails it (a full disk is no
    damaged shard), ending with `fix` (what to do; by default, for a shard); the partial copy is
    removed. Errors reading `pieces` pass through as they are."""
    written = 0
    fix = fix or f"free disk there, or put the shard where there is room ({copied}) and pass its path"
    out = open(target, "wb")
    try:
        for piece in pieces:
            written += len(piece)
            if written > room:
                raise SourceError(
                    f"{name}: {copied}, it passes {room:,} bytes, the room for it beside the output in "
                    f"{target.parent.parent} (free disk less max({RESERVE_BYTES >> 30} GiB, "
                    f"{RESERVE_SHARE:.0%}), at most half of it): {fix}")
            try:
                out.write(piece)
            except OSError as exc:
                raise _write_failed(exc, name, copied, target, written - len(piece), fix) from None
        try:
            out.flush()  # a full disk may refuse only the buffered tail: still the disk's failure
        except OSError as exc:
            raise _write_failed(exc, name, copied, target, written, fix) from None
    except BaseException:
        with contextlib.suppress(OSError):  # a tail the disk refused fails the close again
            out.close()
        target.unlink(missing_ok=True)
        raise
    out.close()
    return written


def _write_failed(exc: OSError, name: str, copied: str, target: Path, at: int, fix: str) -> SourceError:
    """The one-line error of a write to `target` that the disk failed (`at` bytes were written before)."""
    return SourceError(f"{name}: writing it {copied} beside the output in {target.parent.parent} "
                       f"failed after {at:,} bytes ({exc.strerror or exc}): {fix}")
