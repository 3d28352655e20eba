"""Retrying transient storage errors (timeouts, resets, 5xx, throttling) with exponential backoff."""
from __future__ import annotations

import random
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

T = TypeVar("T")

# Words in an exception class name (or its bases) that mark a transient failure, whatever the
# library: aiohttp, botocore, google-api-core and the standard library all name them this way.
TRANSIENT_WORDS = ("connection", "timeout", "throttl", "slowdown", "disconnected", "payload", "incomplete",
                   "unavailable", "toomanyrequests", "internalserver", "servererror", "streaming", "reset")
PERMANENT = (FileNotFoundError, PermissionError, IsADirectoryError, NotADirectoryError)


class Mismatch(Exception):
    """A fetched object whose size or checksum differs from the manifest's."""


@dataclass(frozen=True)
class RetryPolicy:
    """How often and how patiently a transient failure is retried (about 30 s in all by default)."""

    attempts: int = 7
    first_delay: float = 0.5
    max_delay: float = 8.0
    mismatch_attempts: int = 2  # a short body may be a cut transfer: fetched once more, then final


DEFAULT_POLICY = RetryPolicy()


def _status(exc: BaseException) -> int | None:
    for name in ("status", "status_code", "code"):
        value = getattr(exc, name, None)
        if isinstance(value, int) and 100 <= value < 600:
            return value
    return None


def is_transient(exc: BaseException) -> bool:
    """Whether retrying `exc` may succeed: 5xx, 408, 429 and connection/timeout errors; not 4xx or missing."""
    if isinstance(exc, PERMANENT):
        return False
    status = _status(exc)
    if status is not None:
        return status >= 500 or status in (408, 429)
    names = " ".join(cls.__name__.lower() for cls in type(exc).__mro__)
    return isinstance(exc, (TimeoutError, ConnectionError)) or any(word in names for word in TRANSIENT_WORDS)


def with_retries(action: Callable[[], T], policy: RetryPolicy = DEFAULT_POLICY) -> T:
    """Run `action`, retrying transient failures with jittered exponential backoff; re-raise the last."""
    failures = mismatches = 0
    while True:
        try:
            return action()
        except Mismatch:
            mismatches += 1
            if mismatches >= policy.mismatch_attempts:
                raise
        except Exception as exc:  # noqa: BLE001 - classified, then retried or re-raised
            failures += 1
            if not is_transient(exc) or failures >= policy.attempts:
                raise
            delay = min(policy.max_delay, policy.first_delay * 2 ** (failures - 1))
            time.sleep(delay * (0.5 + random.random() / 2))
