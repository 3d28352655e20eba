"""Progress that behaves in a log: a tqdm bar on a terminal; elsewhere (a file, a pipe, a CI log)
a plain line now and then and one at the end, never carriage returns or bar glyphs."""
from __future__ import annotations

import io
import sys
from collections.abc import Iterable, Sized
from typing import IO, Any

from tqdm import tqdm

LOG_SECONDS = 30.0  # how often a log that is not a terminal gets a progress line
LOG_FORMAT = "{desc}: {n_fmt}/{total_fmt} {unit} ({percentage:.0f}%), {elapsed} elapsed, {rate_fmt}"
LOG_FORMAT_NO_TOTAL = "{desc}: {n_fmt} {unit}, {elapsed} elapsed, {rate_fmt}"


def is_terminal(stream: IO[str]) -> bool:
    """Whether `stream` is an interactive terminal (a closed or odd stream is not)."""
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError, OSError):
        return False


class _Lines(io.TextIOBase):
    """A text stream that turns tqdm's carriage-return redraws into whole lines (trailing padding
    dropped, a line whose count is the previous one's left out: closing redraws the last state)."""

    def __init__(self, stream: IO[str]) -> None:
        self.stream, self._last = stream, ""

    def write(self, text: str) -> int:
        for part in text.replace("\r", "\n").split("\n"):
            part = part.rstrip()
            count = part.split(",")[0]  # "desc: n/total unit (share%)": the time and rate follow
            if part and count != self._last:
                self.stream.write(part + "\n")
                self._last = count
        return len(text)

    def flush(self) -> None:
        self.stream.flush()


def progress(iterable: Iterable[Any] | None = None, *, desc: str, unit: str = "it", total: float | None = None,
             disable: bool = False, file: IO[str] | None = None, log_seconds: float = LOG_SECONDS,
             **options: Any) -> tqdm:
    """A tqdm progress bar over `iterable` (or updated by hand with `total`) that behaves in a log:
    on a terminal, tqdm's bar as usual; on any other stream, a plain line (count, share, time,
    rate) at most every `log_seconds` and a last one when it closes."""
    stream = sys.stderr if file is None else file
    if is_terminal(stream) or disable:
        return tqdm(iterable, desc=desc, unit=unit, total=total, disable=disable, file=stream, **options)
    if total is None and isinstance(iterable, Sized):
        total = len(iterable)
    log_format = LOG_FORMAT if total is not None else LOG_FORMAT_NO_TOTAL
    options = {**options, "mininterval": log_seconds, "maxinterval": max(log_seconds, 10.0), "miniters": 1,
               "bar_format": log_format if options.get("bar_format") is None else options["bar_format"],
               "ascii": True, "dynamic_ncols": False, "ncols": None}
    return tqdm(iterable, desc=desc, unit=unit, total=total, file=_Lines(stream), **options)
