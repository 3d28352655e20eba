"""Retrying transient storage errors (timeouts, resets, 5xx, throttling) with jittered exponential
backoff, within a time budget; telling what failed truthfully (a 500 is not "not found")."""
from __future__ import annotations

import os
import random
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

from ...errors import OptionError, add_note

T = TypeVar("T")

# Words in an exception class name (or its bases) that mark a transient failure, whatever the
# library: aiohttp, botocore, google-api-core and the standard library all name them this way.
TRANSIENT_WORDS = ("connection", "timeout", "throttl", "slowdown", "disconnected", "payload", "incomplete",
                   "unavailable", "toomanyrequests", "internalserver", "servererror", "streaming", "reset")
PERMANENT = (FileNotFoundError, PermissionError, IsADirectoryError, NotADirectoryError)
BUDGET_VARIABLE = "IOFEED_RETRY_SECONDS"


class Mismatch(Exception):
    """A fetched object whose size or checksum differs from the manifest's."""


class TooSlow(TimeoutError):
    """A body that keeps trickling in, too slowly to finish within its attempt's deadline."""


@dataclass(frozen=True)
class RetryPolicy:
    """How often and how patiently a transient failure is retried.

    No retry starts once `budget` seconds have been spent without receiving data (failed attempts
    and the waits between them; a download that streamed a while before it was cut counts only its
    silence), and an attempt that receives nothing for `stall_seconds` fails: a dead or stalled
    server is given up after about `budget` seconds (30 s by default, 40 s at most)."""

    attempts: int = 7
    first_delay: float = 0.5
    max_delay: float = 8.0
    budget: float = 30.0
    stall_seconds: float = 10.0  # connect, and each read of a body: the per-attempt deadline
    min_rate: float = float(1 << 20)  # bytes/s: a whole body gets stall_seconds + its size / min_rate
    mismatch_attempts: int = 2  # a short body may be a cut transfer: fetched once more, then final


DEFAULT_POLICY = RetryPolicy()


def policy_from_env() -> RetryPolicy:
    """The default policy, or one whose budget is `IOFEED_RETRY_SECONDS` (the stall deadline
    then at most a third of it)."""
    text = os.environ.get(BUDGET_VARIABLE)
    if not text:
        return DEFAULT_POLICY
    try:
        budget = float(text)
    except ValueError:
        budget = -1.0
    if not 0 < budget < float("inf"):
        raise OptionError(f"{BUDGET_VARIABLE}={text!r} must be a positive number of seconds (default 30)")
    return RetryPolicy(budget=budget, stall_seconds=min(DEFAULT_POLICY.stall_seconds, max(budget / 3, 0.1)),
                       first_delay=min(DEFAULT_POLICY.first_delay, budget / 10))


def _status(exc: BaseException) -> int | None:
    for name in ("status", "status_code", "code"):
        value = getattr(exc, name, None)
        if isinstance(value, int) and 100 <= value < 600:
            return value
    response = getattr(exc, "response", None)  # botocore's ClientError
    if isinstance(response, dict):
        value = response.get("ResponseMetadata", {}).get("HTTPStatusCode")
        if isinstance(value, int):
            return value
    return None


def root_cause(exc: BaseException) -> BaseException:
    """The error a library's OSError wraps: fsspec's HTTP filesystem turns every failed HEAD+GET (a
    500, a refused connection) into FileNotFoundError raised from the real error, and s3fs turns a
    botocore ClientError it does not know (a 500) into OSError(EIO) raised from it."""
    while isinstance(exc, OSError) and exc.__cause__ is not None:
        exc = exc.__cause__
    return exc


def _transient_kind(exc: BaseException) -> bool:
    if isinstance(exc, PERMANENT):
        return False
    names = " ".join(cls.__name__.lower() for cls in type(exc).__mro__)
    return isinstance(exc, (TimeoutError, ConnectionError)) or any(word in names for word in TRANSIENT_WORDS)


def is_transient(exc: BaseException) -> bool:
    """Whether retrying `exc` may succeed: 5xx, 408, 429 and connection/timeout errors (the error
    or the one it wraps); not a real 404/403 or another 4xx."""
    cause = root_cause(exc)
    status = _status(cause)
    if status is not None:
        return status >= 500 or status in (408, 429)
    return _transient_kind(cause) or _transient_kind(exc)


def _first_line(exc: BaseException) -> str:
    try:
        text = str(exc).strip()
    except Exception:  # noqa: BLE001 - a library's __str__ that fails on a partly built error
        return ""
    return text.splitlines()[0] if text else ""


def describe(exc: BaseException) -> str:
    """What failed, in a few words: "not found (HTTP 404)" only for a real 404."""
    cause = root_cause(exc)
    status = _status(cause)
    if status == 404 or (status is None and isinstance(cause, FileNotFoundError)):
        text = "not found" + (" (HTTP 404)" if status else "")
    elif status == 403 or (status is None and isinstance(cause, PermissionError)):
        text = "access denied" + (" (HTTP 403)" if status else "")
    elif isinstance(cause, Mismatch):
        text = str(cause)
    elif status is not None:
        text = f"HTTP {status} {getattr(cause, 'message', '') or ''}".rstrip()
    else:
        detail = _first_line(cause)
        if isinstance(cause, TimeoutError) or "timeout" in type(cause).__name__.lower():
            text = f"timed out ({type(cause).__name__}: {detail or 'no answer in time'})"
        else:
            text = f"{type(cause).__name__}: {detail or 'no detail'}"
    notes = [note for note in getattr(exc, "__notes__", ()) if note.startswith("after ")]
    return f"{text}, {notes[-1]}" if notes else text


def with_retries(action: Callable[[], T], policy: RetryPolicy = DEFAULT_POLICY, *,
                 last_data: Callable[[], float] | None = None, clock: Callable[[], float] = time.monotonic,
                 sleep: Callable[[float], object] = time.sleep) -> T:
    """Run `action`, retrying transient failures with jittered exponential backoff while the policy's
    attempts last and the time spent without data (failed attempts, waits) stays within its budget;
    re-raise the last failure, noting the attempts and time spent. `last_data` gives the `clock`
    time of the last byte an attempt received: a download cut after streaming a while is retried."""
    failures = mismatches = 0
    first = started = clock()
    idle = 0.0
    while True:
        try:
            return action()
        except Mismatch:
            mismatches += 1
            if mismatches >= policy.mismatch_attempts:
                raise
        except Exception as exc:  # noqa: BLE001 - classified, then retried or re-raised
            failures += 1
            now = clock()
            idle += now - max(started, last_data() if last_data else started)
            delay = min(policy.max_delay, policy.first_delay * 2 ** (failures - 1)) * (0.5 + random.random() / 2)
            if not is_transient(exc) or failures >= policy.attempts or idle + delay >= policy.budget:
                if failures > 1 or is_transient(exc):
                    add_note(exc, f"after {failures} attempt{'s' * (failures > 1)} in {now - first:.1f} s")
                raise
            sleep(delay)
            idle += delay
        started = clock()
