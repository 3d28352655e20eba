"""Errors iofeed raises: each message names the bad value and what to do about it."""
from __future__ import annotations


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


def require(module: str, extra: str):
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
