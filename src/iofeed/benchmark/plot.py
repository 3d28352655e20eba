"""The results as a PNG: images/sec per feed, with GPU utilisation (per feed and over time) when a
GPU was used, CPU utilisation per feed otherwise."""
from __future__ import annotations

from pathlib import Path
from typing import Any


def plot(record: dict[str, Any], path: Path) -> None:
    """Draw `record` (a results document) into `path` with matplotlib's Agg backend."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    feeds = [f for f in record["feeds"] if f["status"] == "ok"]
    names = [f["name"] for f in feeds]
    timeline = record["gpu_timeline"]
    gpu = record["machine"]["gpu"] is not None and bool(timeline)
    panels = 3 if gpu else 2
    fig, axes = plt.subplots(panels, 1, figsize=(9, 3.2 * panels), constrained_layout=True)
    settings = record["settings"]
    title = (f"iofeed bench — batch {settings['batch_size']}, {settings['image_size']} px, "
             f"model {settings['model']}, {settings['device']}; {record['machine']['cpu_model']}, "
             f"{record['machine']['cores']} cores")
    fig.suptitle(title, fontsize=9)

    rates = [f["images_per_sec"] for f in feeds]
    bars = axes[0].barh(names, rates, color="tab:blue")
    axes[0].bar_label(bars, labels=[f"{r:,.0f}" for r in rates], padding=3, fontsize=8)
    axes[0].set_xlabel("images/sec (timed windows)")
    axes[0].invert_yaxis()

    if gpu:
        utils = [(f["training"] or {}).get("gpu_util_mean") or 0.0 for f in feeds]
        axes[1].barh(names, utils, color="tab:green")
        axes[1].set_xlabel("mean GPU utilisation % while timed")
        axes[1].set_xlim(0, 100)
        axes[1].invert_yaxis()
        for name in names:
            points = [(s["t"], s["util"]) for s in timeline if s["feed"] == name]
            if points:
                axes[2].scatter(*zip(*points), s=4, label=name)
        axes[2].set_xlabel("seconds since sampling began")
        axes[2].set_ylabel("GPU util %")
        axes[2].legend(fontsize=7, markerscale=3)
    else:
        cores = max((len(f["cpu_percent_per_core"]) for f in feeds), default=0)
        left = [0.0] * len(feeds)
        for core in range(cores):
            share = [f["cpu_percent_per_core"][core] / cores for f in feeds]
            axes[1].barh(names, share, left=left, label=f"core {core}")
            left = [a + b for a, b in zip(left, share)]
        axes[1].set_xlabel("machine CPU utilisation % while timed (stacked by core)")
        axes[1].set_xlim(0, 100)
        axes[1].invert_yaxis()
        if 0 < cores <= 16:
            axes[1].legend(fontsize=7, loc="lower right")
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
