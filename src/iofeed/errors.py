"""Errors iofeed raises: each message names the bad value and what to do about it."""
from __future__ import annotations

from types import ModuleType


class IofeedError(Exception):
    """Base of every error iofeed raises on purpose (the CLI prints it on one line)."""


class OptionError(IofeedError, ValueError):
    """A bad argument or option value."""


class SourceError(IofeedError):
    """A missing, empty or unreadable source (folder or iofeed dataset)."""


class DatasetError(IofeedError):
    """An iofeed dataset on disk that is incomplete, corrupt or of an unknown format."""


class SampleError(IofeedError):
    """One sample that could not be read or decoded."""


class WorkerError(IofeedError, RuntimeError):
    """A loader worker process died or raised."""


class MissingDependencyError(IofeedError, ImportError):
    """An optional dependency (torch, tensorflow, DALI...) is not installed."""


def require(module: str, extra: str) -> ModuleType:
    """Import an optional module, or raise a one-line error with the install command."""
    import importlib

    try:
        return importlib.import_module(module)
    except ImportError as exc:
        raise MissingDependencyError(
            f"{module} is not installed: run `pip install 'iofeed[{extra}]'` ({exc})"
        ) from None


class FetchError(SampleError):
    """A remote shard that could not be fetched or verified (its samples cannot be read)."""


class CacheWriteError(FetchError):
    """A shard that could not be written into the node's cache (disk full, I/O error, read-only):
    the cache's fault, not the shard's; the message names cache_dir, the shard and the free space."""


class StartError(IofeedError, RuntimeError):
    """Worker processes that cannot be started from where the caller runs."""


class FeedUnavailable(IofeedError):
    """A bench feed that cannot run here (the reason is shown in the results, the run goes on)."""


class LoaderStateError(IofeedError, RuntimeError):
    """A loader used after `close()`, or iterated twice at once."""

    @classmethod
    def closed(cls) -> LoaderStateError:
        """The error for a loader asked for a batch after `close()`."""
        return cls("this loader was closed (close() or the end of its `with` block): "
                   "make a new one with iofeed.loader(...)")


# Out of memory. Under `ulimit -v` (RLIMIT_AS, inherited by every worker) an allocation fails as a
# MemoryError, ENOMEM, a shared library that cannot be mapped (an ImportError), or a crash inside C
# code: the sample being read when it happens is healthy, the limit is the cause.
MAPPING_FAILURES = ("failed to map segment", "cannot allocate memory")


def address_space_limit() -> int | None:
    """This process's soft RLIMIT_AS (`ulimit -v`) in bytes; None when unlimited."""
    import resource

    soft, _ = resource.getrlimit(resource.RLIMIT_AS)
    return None if soft == resource.RLIM_INFINITY else soft


def is_out_of_memory(exc: BaseException) -> bool:
    """Whether `exc` is an allocation failure rather than a fault of the data."""
    import errno

    if isinstance(exc, MemoryError) or (isinstance(exc, OSError) and exc.errno == errno.ENOMEM):
        return True
    return isinstance(exc, ImportError) and any(text in str(exc).lower() for text in MAPPING_FAILURES)


def out_of_memory(doing: str) -> str:
    """The one-line message for an allocation that failed `doing` (e.g. "while reading X"): the limit
    that was reached, named with its value, and the fix; the sample is not blamed."""
    limit = address_space_limit()
    if limit is None:
        return (f"out of memory {doing} (the sample is likely healthy): the machine or container is full, with "
                "no `ulimit -v` limit: lower workers or batch_size, or give the container more memory")
    return (f"out of memory {doing} (the sample is likely healthy): the address-space limit RLIMIT_AS (`ulimit "
            f"-v`) is {limit / 2**30:.2f} GiB, and loader workers inherit it: raise it (`ulimit -v unlimited`), or "
            "lower workers or batch_size")


def memory_limit_note() -> str:
    """For a worker that crashed: the address-space limit it ran under, if one is set ('' if not)."""
    limit = address_space_limit()
    if limit is None:
        return ""
    return (f"; it ran under an address-space limit RLIMIT_AS (`ulimit -v`) of {limit / 2**30:.2f} GiB, and an "
            "allocation past it can crash a worker like this: raise it (`ulimit -v unlimited`) to rule it out")


def add_note(exc: BaseException, note: str) -> None:
    """`exc.add_note(note)` where Python has it (3.11+); on 3.10 the note is left out rather than
    turning the error being reported into an AttributeError."""
    adder = getattr(exc, "add_note", None)
    if adder is not None:
        adder(note)
