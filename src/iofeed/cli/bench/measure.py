"""Measuring feeds in alternation: warm-up, then rounds of windows, each window first draining the
feed's prefetch buffer untimed, then timing whole batches. CPU per core and peak memory per feed."""
from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import psutil

from ...errors import FeedUnavailable
from ...runtime.progress import progress as progress_bar
from .feeds import FeedSpec
from .host import FeedHost, HostFailed, Tally

CALL_SLACK = 300.0  # default seconds a host may take beyond the asked duration before it counts as hung
MEMORY_INTERVAL = 1.0  # seconds between background memory samples (never inside a timed window)


@dataclass(frozen=True)
class CpuUse:
    """CPU seconds over one timed window."""

    core_busy: list[float]  # per core, the whole machine
    core_total: list[float]
    feed: float  # the feed's processes
    other: float  # every other process, the benchmark's own included
    children: float = 0.0  # of `feed`, the processes under its host (an iofeed feed's workers)

    @property
    def other_share(self) -> float:
        """Share of the machine (0–1) that other processes used."""
        return self.other / sum(self.core_total) if sum(self.core_total) > 0 else 0.0


@dataclass
class Window:
    """One timed window of one feed."""

    round: int
    drained: Tally  # untimed: emptied the prefetch buffer
    timed: Tally
    cpu: CpuUse


@dataclass
class FeedRun:
    """Everything measured for one feed."""

    spec: FeedSpec
    status: str = "ok"  # "ok", "skipped" (cannot run here) or "failed"
    reason: str | None = None
    capacity: int | None = None
    settings: dict[str, Any] = field(default_factory=dict)
    warmup: Tally | None = None
    windows: list[Window] = field(default_factory=list)
    peak_memory_bytes: int = 0
    peak_file_bytes: int | None = None  # of that peak, pages of mapped files (page cache), where the kernel says
    processes: int = 0  # most processes the feed had at once
    max_memory_reserved_bytes: int | None = None  # PyTorch's peak GPU reservation (None off the GPU)

    def reserved(self, tally: Tally) -> None:
        """Keep the highest GPU reservation a host reported."""
        if tally.max_memory_reserved_bytes is not None:
            self.max_memory_reserved_bytes = max(self.max_memory_reserved_bytes or 0,
                                                 tally.max_memory_reserved_bytes)

    def stop(self, status: str, reason: str) -> None:
        """Mark the feed as not measured (further)."""
        self.status, self.reason = status, reason


def file_backed(pid: int, metric: str) -> int | None:
    """The part of a process's `metric` ("pss" or "rss") that is pages of mapped files, which the
    page cache holds and the kernel may drop (a raw feed's memory-mapped shards): `Pss_File` of
    /proc/PID/smaps_rollup, or `RssFile` of /proc/PID/status; None where the kernel does not say."""
    source, key = ((f"/proc/{pid}/smaps_rollup", "Pss_File:") if metric == "pss"
                   else (f"/proc/{pid}/status", "RssFile:"))
    try:
        with open(source, encoding="ascii", errors="replace") as f:
            for line in f:
                if line.startswith(key):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return None


def memory_metric() -> str:
    """"pss" where the kernel gives it (shared pages counted once), else "rss"."""
    return "pss" if hasattr(psutil.Process().memory_full_info(), "pss") else "rss"


class MemoryWatch:
    """A background thread summing the memory of the watched feed's processes (PSS where the
    kernel gives it — shared pages counted once — else RSS) and keeping each feed's peak.

    Reading PSS is slow for a process that maps much memory (the kernel walks its page tables):
    sampled inside timed windows it takes CPU from the feed measured
    (docs/decisions/0066-measure-reads-memory-only-outside-timed-windows.md).
    So it samples only outside them: in the background during warm-up and drains, and
    at each window's edges (loaders allocate their buffers up front; growth over a window
    shows in the sample after it).
    """

    def __init__(self, interval: float) -> None:
        self.metric = memory_metric()
        self._interval = interval
        self._target: tuple[FeedRun, FeedHost] | None = None
        self._lock = threading.Lock()
        self._stopped = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="iofeed-bench-memory", daemon=True)
        self._thread.start()

    @contextmanager
    def watching(self, run: FeedRun, host: FeedHost) -> Iterator[None]:
        """Sample `host`'s processes into `run` while the block runs (and once at each end)."""
        self.sample(run, host)
        with self._lock:
            self._target = (run, host)
        try:
            yield
        finally:
            with self._lock:
                self._target = None
            self.sample(run, host)

    def _loop(self) -> None:
        while not self._stopped.wait(self._interval):
            with self._lock:
                target = self._target
            if target is not None:
                self.sample(*target)

    def sample(self, run: FeedRun, host: FeedHost) -> None:
        """Add one sample of `host`'s processes to `run`'s peak."""
        total = count = 0
        files: int | None = 0
        for pid in host.pids():
            try:
                info = psutil.Process(pid).memory_full_info()
            except psutil.Error:
                continue
            total += getattr(info, self.metric)
            count += 1
            mapped = file_backed(pid, self.metric)
            files = None if files is None or mapped is None else files + mapped
        if total >= run.peak_memory_bytes:
            run.peak_file_bytes = files
        run.peak_memory_bytes = max(run.peak_memory_bytes, total)
        run.processes = max(run.processes, count)

    def close(self) -> None:
        """Stop the thread."""
        self._stopped.set()
        self._thread.join()


def _process_cpu(pids: list[int]) -> dict[int, float]:
    """User + system CPU seconds of each live process."""
    out = {}
    for pid in pids:
        try:
            times = psutil.Process(pid).cpu_times()
        except psutil.Error:
            continue
        out[pid] = times.user + times.system
    return out


def _total_idle(times: Any) -> tuple[float, float]:
    """(all CPU seconds, idle + iowait seconds) of one core; guest time is already in user time."""
    total = sum(times) - getattr(times, "guest", 0.0) - getattr(times, "guest_nice", 0.0)
    return total, times.idle + getattr(times, "iowait", 0.0)


class _CpuMeter:
    """Per-core busy time of the machine and CPU time of one feed's processes, over one window."""

    def __init__(self, host: FeedHost) -> None:
        self._host = host
        self._cores = psutil.cpu_times(percpu=True)
        self._procs = _process_cpu(host.pids())

    def read(self) -> CpuUse:
        """CPU use since construction."""
        busy, total = [], []
        for before, after in zip(self._cores, psutil.cpu_times(percpu=True)):
            (all1, idle1), (all0, idle0) = _total_idle(after), _total_idle(before)
            busy.append(max((all1 - idle1) - (all0 - idle0), 0.0))
            total.append(max(all1 - all0, 0.0))
        pids = self._host.pids()
        procs = _process_cpu(pids)
        used = {pid: max(t - self._procs.get(pid, 0.0), 0.0) for pid, t in procs.items()}
        mine, children = sum(used.values()), sum(t for pid, t in used.items() if pid not in pids[:1])
        return CpuUse(busy, total, mine, max(sum(busy) - mine, 0.0), children)


def measure(runs: list[FeedRun], rounds: int, window_seconds: float, warmup_seconds: float,
            gpu: Any = None, progress: bool = True, slack: float = CALL_SLACK,
            after_window: Callable[[], None] | None = None) -> None:
    """Start every feed of `runs`, warm each up, then run `rounds` rounds of one window per feed,
    the order rotating each round; `after_window()` after each window (a run cut off by a timeout
    keeps every window it finished). Results go into `runs` as they come: windows finished before
    an exception (Ctrl-C included) are kept there. A host that takes `slack` seconds more than it
    was asked is killed and its feed marked failed; the others go on.

    Only one feed uses the GPU at a time: each host hands back its unused GPU cache after its
    warm-up and after each timed window (`release=True`), and regrows it in the next drain.
    """
    hosts: dict[str, FeedHost] = {}
    watch = MemoryWatch(MEMORY_INTERVAL)
    try:
        for run in runs:  # all started first: their start-ups overlap
            hosts[run.spec.name] = FeedHost(run.spec)
        for run in progress_bar(runs, desc="starting feeds", unit="feed", disable=not progress):
            host = hosts[run.spec.name]
            try:
                host.ready()
                run.capacity, run.settings = host.capacity, host.settings
                with watch.watching(run, host):  # the first batch (start-up), then `warmup_seconds` more
                    first = host.consume(timeout=slack, batches=1)
                    rest = host.consume(timeout=warmup_seconds + slack, seconds=warmup_seconds, release=True)
                run.reserved(rest)
                run.warmup = Tally(first.images + rest.images, first.batches + rest.batches,
                                   first.seconds + rest.seconds, first.wait_seconds + rest.wait_seconds)
            except FeedUnavailable as exc:
                run.stop("skipped", str(exc))
            except HostFailed as exc:
                run.stop("failed", str(exc))
        live = [run for run in runs if run.status == "ok"]
        bar = progress_bar(total=rounds * len(live), desc="measuring", unit="window", disable=not progress)
        for number in range(rounds):
            shift = number % max(len(live), 1)
            for run in live[shift:] + live[:shift]:
                if run.status != "ok":
                    continue
                bar.set_postfix_str(run.spec.name)
                try:
                    _window(run, hosts[run.spec.name], number, window_seconds, watch, gpu, slack)
                except HostFailed as exc:
                    run.stop("failed", str(exc))
                    hosts.pop(run.spec.name).close()
                bar.update(1)
                if after_window is not None:
                    after_window()
        bar.close()
    finally:
        watch.close()
        for host in hosts.values():
            host.close()


def _window(run: FeedRun, host: FeedHost, number: int, seconds: float, watch: MemoryWatch, gpu: Any,
            slack: float = CALL_SLACK) -> None:
    """Drain the prefetch buffer (capacity + 1 batches, untimed), then time at least `seconds`;
    memory is sampled around the timed part, not during it (see MemoryWatch)."""
    with watch.watching(run, host):
        drained = host.consume(timeout=slack, batches=(run.capacity or 0) + 1)
    meter = _CpuMeter(host)
    if gpu is not None:
        gpu.label = run.spec.name
    try:
        timed = host.consume(timeout=seconds + slack, seconds=seconds, release=True)
    finally:
        if gpu is not None:
            gpu.label = None
    cpu = meter.read()
    run.reserved(timed)
    watch.sample(run, host)
    run.windows.append(Window(number, drained, timed, cpu))
