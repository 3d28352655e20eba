"""Remote shards copied whole into a local spool file for `preprocess` and `index`: retried like
every other read, and every error naming the URL and its cause, never the spool file."""
from __future__ import annotations

import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from ..errors import IofeedError, SourceError
from .retry import describe, is_transient, policy_from_env, with_retries
from .urls import filesystem, scheme


def download(url: str, target: Path) -> None:
    """Copy the object at `url` to `target` (streamed, retried when transient under the policy of
    `IOFEED_RETRY_SECONDS`); a one-line SourceError naming the URL and the cause: "not found"
    only for a real 404, "access denied" for a 403, the status of a server error, a timeout's
    deadline, with the attempts made."""
    policy = policy_from_env()
    entry = scheme(url)
    fs = filesystem(url, None, policy)

    def copy() -> None:
        with fs.open(url, "rb", **entry.stream) as src, open(target, "wb") as out:
            shutil.copyfileobj(src, out, 8 << 20)

    try:
        with_retries(copy, policy)
    except Exception as exc:  # noqa: BLE001 - storage errors of any library, named by URL and cause
        target.unlink(missing_ok=True)
        cause = describe(exc)
        advice = ("the server may be down or overloaded: try again later, or set IOFEED_RETRY_SECONDS to wait longer"
                  if is_transient(exc) else "check the URL and your access to it")
        if cause.startswith("timed out"):
            advice = f"each attempt gave up after {policy.stall_seconds:g} s without data; {advice}"
        raise SourceError(f"cannot read shard {url}: {cause} ({advice})") from None


@contextmanager
def named_as(url: str, local: Path | str) -> Iterator[None]:
    """Errors about `local`, the spool copy of `url`, name `url` instead (a user never saw the
    spool file: a corrupt remote shard is reported by its URL)."""
    try:
        yield
    except IofeedError as exc:
        text = str(exc)
        if str(local) not in text:
            raise
        raise type(exc)(text.replace(str(local), url)) from None
