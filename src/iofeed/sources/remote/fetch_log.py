"""The fetch log of a dataset's cache folder: one JSON line per download by any process of the
node, read back from an offset (what a pass or a bench window fetched)."""
from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from .cache_dir import FETCH_LOG


def log_fetch(directory: Path, url: str, size: int, seconds: float) -> None:
    """Record one download in `directory`'s fetch log."""
    line = json.dumps({"url": url, "bytes": size, "seconds": round(seconds, 4), "pid": os.getpid()})
    try:
        fd = os.open(directory / FETCH_LOG, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, (line + "\n").encode())
        finally:
            os.close(fd)
    except OSError:
        pass  # a full disk loses a line of statistics, not the shard that is already in place


def log_offset(directory: Path) -> int:
    """The current end of `directory`'s fetch log."""
    try:
        return (directory / FETCH_LOG).stat().st_size
    except FileNotFoundError:
        return 0


def fetches_since(directory: Path, offset: int) -> list[dict[str, Any]]:
    """Downloads logged in `directory` after `offset` (by any process)."""
    try:
        with open(directory / FETCH_LOG, "rb") as f:
            f.seek(offset)
            text = f.read().decode()
    except FileNotFoundError:
        return []
    return [json.loads(line) for line in text.splitlines() if line.strip()]
