"""The CPU other processes took while the command ran: what the usable cores were busy with beyond
the traced command's own processes (its training processes and their loaders). On a shared
machine the timeline's busy cores are not all the command's, and its figures are lower than on
a quiet one: said as a finding, and drawn apart on the timeline."""
from __future__ import annotations

import numpy as np

from .finding import Finding
from .trace import Trace

OTHERS_SHARE = 25.0  # mean % of the usable cores taken by other processes from which the run is disturbed
MIN_SAMPLES = 5  # samples needed to judge (0.5 s at the default interval)


def command_cpu(trace: Trace) -> np.ndarray:
    """(n,) % of one core the command's own processes used at each sample (training + loaders)."""
    loaders = np.nansum(trace.loader_cpu, axis=0) if len(trace.loader_cpu) else np.zeros(len(trace.t))
    total: np.ndarray = trace.trainer_cpu + loaders
    return total


def other_cpu(trace: Trace) -> np.ndarray:
    """(n,) % of one core the usable cores spent on other processes at each sample (never below 0:
    the two are sampled a few milliseconds apart)."""
    if not trace.cores:
        return np.zeros(len(trace.t))
    others: np.ndarray = np.clip(trace.cpu.sum(axis=0) - command_cpu(trace), 0.0, None)
    return others


def others_finding(trace: Trace) -> Finding | None:
    """"other-processes" when other processes took OTHERS_SHARE of the usable cores or more on
    average while the command ran; None otherwise (or with too few samples to say)."""
    if not trace.cores or len(trace.t) < MIN_SAMPLES:
        return None
    capacity = 100.0 * trace.cores
    others = other_cpu(trace) / capacity * 100
    if others.mean() < OTHERS_SHARE:
        return None
    own = command_cpu(trace).mean() / capacity * 100
    busy = trace.cpu.mean()
    return Finding(
        "other-processes",
        f"Other processes took {others.mean():.0f}% of the CPU while the command ran",
        evidence=[f"the {trace.cores} usable cores were {busy:.0f}% busy on average: the command's own processes "
                  f"(training and loaders) {own:.0f}%, other processes {others.mean():.0f}% (up to "
                  f"{others.max():.0f}%)",
                  "the timeline draws the command's CPU apart from the others'"],
        advice=["the rates and findings are of a shared machine: run again when it is quiet, or on cores of its "
                "own (taskset, a SLURM allocation), before acting on them",
                "`top` or `ps -eo pid,pcpu,comm --sort=-pcpu` names the other processes"])
