"""A loader's stats written where `iofeed doctor` reads them: one JSON file per loader in the
folder `IOFEED_STATS_DIR` names (the doctor sets it for the command it traces), rewritten at most
every WRITE_SECONDS while batches flow, and at close."""
from __future__ import annotations

import contextlib
import json
import os
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

STATS_DIR_ENV = "IOFEED_STATS_DIR"
WRITE_SECONDS = 1.0


class StatsWriter:
    """Writes `snapshot()` (a plain-JSON dict) to `<folder>/loader-<pid>-<n>.json`, with the seconds
    since the first batch was asked for (`elapsed_seconds`)."""

    _count = 0

    def __init__(self, folder: Path) -> None:
        StatsWriter._count += 1
        self.path = folder / f"loader-{os.getpid()}-{StatsWriter._count}.json"
        self._started: float | None = None
        self._written = 0.0

    @classmethod
    def from_env(cls) -> StatsWriter | None:
        """A writer when `IOFEED_STATS_DIR` is set, else None (nothing is written)."""
        folder = os.environ.get(STATS_DIR_ENV)
        return cls(Path(folder)) if folder else None

    def started(self) -> None:
        """The consumer asked for its first batch (once; later calls change nothing)."""
        if self._started is None:
            self._started = time.perf_counter()

    def maybe_write(self, snapshot: Callable[[], dict[str, Any]]) -> None:
        """Write if WRITE_SECONDS passed since the last write."""
        if time.perf_counter() - self._written >= WRITE_SECONDS:
            self.write(snapshot())

    def write(self, stats: dict[str, Any]) -> None:
        """Write `stats` now (atomically: aside, then renamed); a folder gone is not an error."""
        self._written = time.perf_counter()
        elapsed = 0.0 if self._started is None else self._written - self._started
        aside = self.path.with_suffix(".tmp")
        with contextlib.suppress(OSError):
            aside.write_text(json.dumps({**stats, "elapsed_seconds": elapsed}, default=str))
            aside.replace(self.path)


def read_stats(folder: Path) -> list[dict[str, Any]]:
    """Every loader's last stats written to `folder` (unreadable files are left out)."""
    out = []
    for path in sorted(Path(folder).glob("loader-*.json")):
        with contextlib.suppress(OSError, ValueError):
            out.append(json.loads(path.read_text()))
    return out


@contextlib.contextmanager
def stats_folder(folder: Path) -> Iterator[Path]:
    """`IOFEED_STATS_DIR` set to `folder` (made if needed) for child processes started inside."""
    folder.mkdir(parents=True, exist_ok=True)
    before = os.environ.get(STATS_DIR_ENV)
    os.environ[STATS_DIR_ENV] = str(folder)
    try:
        yield folder
    finally:
        if before is None:
            os.environ.pop(STATS_DIR_ENV, None)
        else:
            os.environ[STATS_DIR_ENV] = before
