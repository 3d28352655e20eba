"""The utilisation timeline as a PNG: GPU and CPU utilisation, memory, and every core over time."""
from __future__ import annotations

from pathlib import Path
from typing import Any

from .command import command_text
from .finding import Finding
from .others import command_cpu, other_cpu
from .stats import active_window
from .trace import Recording

GIB = 2**30


def plot_timeline(recording: Recording, findings: list[Finding], path: Path) -> None:
    """Draw `recording`'s trace into `path` with matplotlib's Agg backend."""
    import matplotlib.pyplot as plt

    fig = draw_timeline(recording, findings)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100)
    plt.close(fig)


def draw_timeline(recording: Recording, findings: list[Finding]) -> Any:
    """The matplotlib Figure of `recording`'s trace: GPU and CPU utilisation (the traced command's
    CPU apart from other processes'), memory, and every core over time."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    trace = recording.trace
    fig, (util, mem, heat) = plt.subplots(3, 1, figsize=(10, 9), sharex=True, constrained_layout=True)
    codes = ", ".join(f.code for f in findings) or "no findings"
    fig.suptitle(f"iofeed doctor: {command_text(recording.command, 100)}\n{codes}", fontsize=9)

    for i, row in enumerate(trace.gpu_util):
        util.plot(trace.t, row, lw=1, label=f"GPU {i}")
    if trace.cores:
        util.plot(trace.t, trace.cpu.mean(axis=0), lw=1, ls="--", color="black", label="CPU busy (mean of cores)")
        util.plot(trace.t, command_cpu(trace) / trace.cores, lw=1, color="tab:blue",
                  label="of it the traced command (training + loaders)")
        util.plot(trace.t, other_cpu(trace) / trace.cores, lw=1, color="tab:orange", label="of it other processes")
    util.plot(trace.t, trace.iowait, lw=1, ls=":", color="tab:red", label="iowait")
    window = active_window(trace)
    if trace.gpus and window is not None and window.samples:
        util.axvspan(window.t[0], window.t[-1], color="tab:green", alpha=0.07, label="GPU active window")
    if not trace.gpus:
        util.text(0.01, 0.04, "no GPU", transform=util.transAxes, fontsize=8)
    util.set_ylim(0, 105)
    util.set_ylabel("utilisation %")
    util.legend(fontsize=7, loc="upper right", ncol=2)

    for i, row in enumerate(trace.gpu_mem):
        mem.plot(trace.t, row / GIB, lw=1, label=f"GPU {i} (of {trace.gpu_mem_total[i] / GIB:.0f} GiB)")
    mem.plot(trace.t, trace.rss / GIB, lw=1, ls="--", color="black", label="command's processes (RSS)")
    mem.set_ylim(bottom=0)
    mem.set_ylabel("memory GiB")
    mem.legend(fontsize=7, loc="upper right")

    if trace.cores and len(trace.t):
        extent = (float(trace.t[0]), float(trace.t[-1]) or 1.0, trace.cores - 0.5, -0.5)
        image = heat.imshow(trace.cpu, aspect="auto", extent=extent, vmin=0, vmax=100,
                            cmap="viridis", interpolation="nearest")
        fig.colorbar(image, ax=heat, label="busy %")
    heat.yaxis.get_major_locator().set_params(integer=True)
    heat.set_ylabel("core")
    heat.set_xlabel("seconds since the command started")
    return fig
