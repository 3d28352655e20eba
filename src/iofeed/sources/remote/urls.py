"""Dataset URLs: which schemes are remote, and the fsspec filesystem that reads each (a registry)."""
from __future__ import annotations

import functools
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ...errors import OptionError, require
from .retry import DEFAULT_POLICY, RetryPolicy


def _no_settings() -> dict[str, Any]:
    return {}


def _s3_settings() -> dict[str, Any]:
    """The endpoint (AWS_ENDPOINT_URL_S3 or AWS_ENDPOINT_URL), fixed where the dataset is opened, so
    that worker processes started before the variable was set still use it."""
    endpoint = os.environ.get("AWS_ENDPOINT_URL_S3") or os.environ.get("AWS_ENDPOINT_URL")
    return {"endpoint_url": endpoint} if endpoint else {}


@functools.lru_cache(maxsize=1)
def _no_aws_credentials() -> bool:
    """Whether this process finds no AWS credentials (looked up once: it may query instance metadata)."""
    import botocore.session

    return botocore.session.get_session().get_credentials() is None


def _s3_options(settings: dict[str, Any], policy: RetryPolicy) -> dict[str, Any]:
    """Credentials the AWS way in each process (env, config files, instance roles); anonymous when
    none. One try per call in botocore and s3fs: `with_retries` retries, within its budget."""
    config = {"connect_timeout": policy.stall_seconds, "read_timeout": policy.stall_seconds,
              "retries": {"total_max_attempts": 1}}
    options = {**settings, "config_kwargs": config}
    if _no_aws_credentials():
        options["anon"] = True  # a public bucket needs nothing
    return options


def _gcs_options(settings: dict[str, Any], policy: RetryPolicy) -> dict[str, Any]:
    """Google application default credentials; gcsfs falls back to anonymous access by itself."""
    return dict(settings)


def _http_options(settings: dict[str, Any], policy: RetryPolicy) -> dict[str, Any]:
    """A connection, and each read of a body, fails after the policy's stall deadline (then retried)."""
    import aiohttp

    timeout = aiohttp.ClientTimeout(total=None, sock_connect=policy.stall_seconds, sock_read=policy.stall_seconds)
    return {**settings, "client_kwargs": {"timeout": timeout}}


@dataclass(frozen=True)
class Scheme:
    """How one URL scheme is read: fsspec protocol, the module it needs, its pip extra, and its
    options: `settings` resolved once where the dataset is opened (passed to workers), `options`
    completing them in each process (credentials stay per process, so they can refresh)."""

    protocol: str
    module: str
    extra: str
    settings: Callable[[], dict[str, Any]]
    options: Callable[[dict[str, Any], RetryPolicy], dict[str, Any]]
    stream: dict[str, Any] = field(default_factory=dict)  # `fs.open` arguments to stream a whole object
    writable: bool = True  # whether `iofeed preprocess -o URL` can upload there
    attributes: dict[str, Any] = field(default_factory=dict)  # set on the filesystem instance


SCHEMES: dict[str, Scheme] = {
    "s3": Scheme("s3", "s3fs", "s3", _s3_settings, _s3_options, {"block_size": 16 << 20},
                 attributes={"retries": 1}),  # s3fs's own retries would multiply the budget
    "gs": Scheme("gcs", "gcsfs", "gcs", _no_settings, _gcs_options, {"block_size": 16 << 20}),
    "gcs": Scheme("gcs", "gcsfs", "gcs", _no_settings, _gcs_options, {"block_size": 16 << 20}),
    "http": Scheme("http", "aiohttp", "http", _no_settings, _http_options, {"block_size": 0}, writable=False),
    "https": Scheme("https", "aiohttp", "http", _no_settings, _http_options, {"block_size": 0}, writable=False),
}


def scheme_of(text: str) -> str | None:
    """The URL scheme of `text` (`s3`, `gs`, ...), or None for a local path."""
    head, sep, _ = str(text).partition("://")
    return head.lower() if sep and head.isalnum() else None


def is_url(text: object) -> bool:
    """Whether `text` names a dataset in object storage or on a web server (not a local path)."""
    return isinstance(text, str) and scheme_of(text) is not None


def scheme(url: str) -> Scheme:
    """The registered scheme of `url`; OptionError for an unknown one."""
    name = scheme_of(url)
    if name not in SCHEMES:
        raise OptionError(f"unsupported dataset URL {url!r}: use a local path or one of "
                          f"{', '.join(f'{s}://' for s in SCHEMES)}")
    return SCHEMES[name]


def filesystem(url: str, settings: dict[str, Any] | None = None, policy: RetryPolicy = DEFAULT_POLICY) -> Any:
    """The fsspec filesystem that reads `url` with `settings` (default: resolved here and now) and
    the per-attempt deadlines of `policy`; one instance per process and settings, cached by fsspec."""
    entry = scheme(url)
    require(entry.module, entry.extra)
    fsspec = require("fsspec", entry.extra)
    fs = fsspec.filesystem(entry.protocol, **entry.options(entry.settings() if settings is None else settings, policy))
    for name, value in entry.attributes.items():
        setattr(fs, name, value)
    return fs


def join(url: str, name: str) -> str:
    """`url`/`name`."""
    return f"{url.rstrip('/')}/{name}"
