"""One process per feed ("host"): it builds the feed, consumes its batches on command and
reports counts. Feeds never share a process, so each one's memory and CPU are its own."""
from __future__ import annotations

import signal
import traceback
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass
from multiprocessing.connection import Connection
from time import perf_counter
from typing import Any

from ...errors import FeedUnavailable, IofeedError
from ...runtime.processes import safe_context
from .feeds import FeedSpec, open_feed


class HostFailed(IofeedError):
    """A feed's host process raised, died or stopped answering."""


@dataclass
class Tally:
    """What one call to `consume` pulled from a feed."""

    images: int = 0  # sum of the batch sizes actually yielded
    batches: int = 0
    seconds: float = 0.0
    wait_seconds: float = 0.0  # time blocked waiting for the feed's next batch
    max_memory_reserved_bytes: int | None = None  # PyTorch's peak GPU reservation so far (asked with release)


def consume(stream: Iterator[tuple[Any, Any]], *, batches: int | None = None, seconds: float | None = None,
            step: Callable[[Any, Any], None] | None = None, sync: Callable[[], None] | None = None) -> Tally:
    """Pull exactly `batches` batches, or batches until `seconds` have passed (ending on a batch
    boundary), running `step` on each; `sync` waits for queued device work before the clock stops."""
    if batches is None and seconds is None:
        raise ValueError("consume needs batches or seconds")
    tally = Tally()
    start = perf_counter()
    while batches is None or tally.batches < batches:
        asked = perf_counter()
        images, labels = next(stream)
        tally.wait_seconds += perf_counter() - asked
        if step is not None:
            step(images, labels)
        tally.images += int(images.shape[0])
        tally.batches += 1
        if seconds is not None and perf_counter() - start >= seconds:
            break
    if sync is not None:
        sync()
    tally.seconds = perf_counter() - start
    return tally


def release_gpu_cache(device: str) -> int | None:
    """PyTorch's peak GPU reservation so far (None off the GPU), then its unused cache handed back.

    Called after a timed window: the hosts of the other feeds run their windows on the same GPU
    while this one waits, and the next drain (untimed) grows the cache again.
    """
    if device != "cuda":
        return None
    import torch

    if not torch.cuda.is_initialized():  # type: ignore[no-untyped-call]  # torch leaves it unannotated
        return None
    torch.cuda.synchronize()
    peak = int(torch.cuda.max_memory_reserved())
    torch.cuda.empty_cache()
    return peak


def host_main(spec: FeedSpec, conn: Connection) -> None:
    """Body of a host process: build the feed, then answer ("consume", kwargs) until ("close", {})."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent handles Ctrl-C and closes its hosts
    feed = stream = None
    try:
        feed = open_feed(spec)
        step = sync = None
        if spec.model != "none":
            from .train import make_step

            step, sync = make_step(spec.model, spec.classes, spec.device)
        stream = feed.batches()
        conn.send(("ready", {"capacity": feed.capacity, "settings": feed.settings}))
        while True:
            command, kwargs = conn.recv()
            if command == "close":
                break
            release = kwargs.pop("release", False)
            tally = consume(stream, step=step, sync=sync, **kwargs)
            if release:
                tally.max_memory_reserved_bytes = release_gpu_cache(spec.device)
            conn.send(("done", asdict(tally)))
    except (EOFError, BrokenPipeError):
        pass  # the parent is gone
    except FeedUnavailable as exc:
        _send(conn, ("unavailable", str(exc)))
    except BaseException as exc:  # noqa: BLE001 - reported to the parent
        detail = str(exc) if isinstance(exc, IofeedError) else traceback.format_exc(limit=-3).strip()
        _send(conn, ("error", detail))
    finally:
        if stream is not None:
            stream.close()
        if feed is not None:
            feed.close()


def _send(conn: Connection, message: tuple[str, Any]) -> None:
    try:
        conn.send(message)
    except OSError:
        pass


class FeedHost:
    """The parent's handle on a host process: started at construction, usable once `ready()` returned.

    Hosts are started side by side and then waited for, so that their start-ups (PyTorch, the
    model, the feed's workers) overlap instead of adding up."""

    def __init__(self, spec: FeedSpec) -> None:
        ctx = safe_context()
        self.spec = spec
        self._conn, theirs = ctx.Pipe(duplex=True)
        # not a daemon: daemonic processes may not start the feed's own workers
        self.process = ctx.Process(target=host_main, args=(spec, theirs), name=f"iofeed-bench:{spec.name}")
        self.process.start()
        theirs.close()
        self.capacity: int = 0
        self.settings: dict[str, Any] = {}

    def ready(self, timeout: float = 900.0) -> None:
        """Wait for the feed to be built; HostFailed or FeedUnavailable (and the host closed) otherwise."""
        try:
            info = self._reply(timeout)
        except BaseException:
            self.close()
            raise
        self.capacity, self.settings = info["capacity"], info["settings"]

    def consume(self, timeout: float, **kwargs: Any) -> Tally:
        """Have the host consume (see `consume`) and return its tally; `release=True` then hands
        back its unused GPU cache and reports its peak reservation (`release_gpu_cache`)."""
        try:
            self._conn.send(("consume", kwargs))
        except OSError:  # it died since its last reply: _reply says how
            pass
        return Tally(**self._reply(timeout))

    def pids(self) -> list[int]:
        """The host and every process under it (workers, their forkserver)."""
        import psutil

        try:
            return [self.process.pid, *(c.pid for c in psutil.Process(self.process.pid).children(recursive=True))]
        except psutil.Error:
            return []

    def _reply(self, timeout: float) -> Any:
        if not self._conn.poll(timeout):
            self.close(grace=0.0)  # hung: it would not read a request to stop either
            raise HostFailed(f"feed {self.spec.name} did not answer within {timeout:g} s (killed)")
        try:
            kind, payload = self._conn.recv()
        except (EOFError, OSError):
            self.process.join(5.0)
            raise HostFailed(f"feed {self.spec.name}: its process died (exit code {self.process.exitcode})") from None
        if kind == "unavailable":
            raise FeedUnavailable(payload)
        if kind == "error":
            raise HostFailed(f"feed {self.spec.name} failed: {payload}")
        return payload

    def close(self, grace: float = 30.0) -> None:
        """Ask the host to stop; kill it and its children if it does not within `grace` s (idempotent)."""
        if self.process.pid is not None and self.process.exitcode is None:
            children = self.pids()[1:]
            try:
                self._conn.send(("close", {}))
            except OSError:
                pass
            self.process.join(grace)
            if self.process.exitcode is None:
                _kill([self.process.pid, *children])
                self.process.join(5.0)
        if not self._conn.closed:
            self._conn.close()


def _kill(pids: list[int]) -> None:
    """SIGKILL these processes (those still alive)."""
    import psutil

    for pid in pids:
        try:
            psutil.Process(pid).kill()
        except psutil.Error:
            pass
