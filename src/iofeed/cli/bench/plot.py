"""The results as a PNG to paste into a report: images/sec with the ratio to the baseline and the
spread of the timed windows, then per feed CPU time per image, peak memory (and GPU utilisation and
memory when a GPU was used), every feed of the record on every panel, a feed that did not run
pointing at its reason, written whole below the rates; the GPU utilisation over time below when
it was sampled."""
from __future__ import annotations

import textwrap
from collections.abc import Callable
from pathlib import Path
from typing import Any

from .feeds import FEEDS
from .report import baselines, disturbance

MIB = 2**20
DISTURBED_COLOUR = "tab:red"
PAGE_CACHE_SHARE = 0.5  # a memory bar more than this much mapped files is labelled as page cache
SKIPPED_COLOUR, BASELINE_COLOUR, FEED_COLOUR, CEILING_COLOUR = "0.55", "tab:orange", "tab:blue", "tab:green"
NOTE_CHARS = 170  # a feed's reason for not running is wrapped at this width below the rates, whole
NOTE_LINE_INCHES = 0.17


def metrics(record: dict[str, Any]) -> list[tuple[str, Callable[[dict[str, Any]], float | None], str]]:
    """The small panels for `record`: (axis label, value of a feed record or None, number format)."""
    memory = record["settings"].get("memory_metric", "rss")
    panels: list[tuple[str, Callable[[dict[str, Any]], float | None], str]] = [
        ("CPU ms per image\n(the feed's processes)", lambda f: f["cpu_ms_per_image"], ".2f"),
        (f"peak memory MiB\n(the feed's processes, {memory}; page cache: mapped files)",
         lambda f: None if f["peak_memory_bytes"] is None else f["peak_memory_bytes"] / MIB, ",.0f"),
    ]
    if any((f.get("training") or {}).get("gpu_util_mean") is not None for f in record["feeds"]):
        panels.append(("mean GPU utilisation %\nwhile timed", lambda f: (f["training"] or {}).get("gpu_util_mean"),
                       ".0f%"))
    if any(f["max_memory_reserved_bytes"] is not None for f in record["feeds"]):
        panels.append(("GPU memory reserved MiB\n(PyTorch, peak)", lambda f: None if f["max_memory_reserved_bytes"]
                       is None else f["max_memory_reserved_bytes"] / MIB, ",.0f"))
    return panels


def draw(record: dict[str, Any]) -> Any:
    """The matplotlib Figure of `record` (a results document), with the Agg backend."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    feeds = record["feeds"]
    names = [f["name"] for f in feeds]
    panels = metrics(record)
    timeline = [s for s in record["gpu_timeline"] if s["feed"] is not None]
    notes = not_run_notes(feeds)
    notes_height = NOTE_LINE_INCHES * (len(notes) + 1) if notes else 0.0
    rows = 2 + bool(timeline) + bool(notes)
    height = 0.32 * len(feeds) + 1.4
    fig = plt.figure(figsize=(max(12.0, 3.6 * len(panels)), 2 * height + (3.2 if timeline else 0) + notes_height + 0.9),
                     constrained_layout=True)
    grid = fig.add_gridspec(rows, len(panels), height_ratios=[height] + ([notes_height] if notes else []) + [height]
                            + ([3.2] if timeline else []))
    disturbed = disturbance(record)
    fig.suptitle(_title(record) + (f"\n{disturbed.upper()[:1]}{disturbed[1:]}" if disturbed else ""), fontsize=9,
                 color=DISTURBED_COLOUR if disturbed else "black")

    rate_axes = fig.add_subplot(grid[0, :])
    _rates(rate_axes, record)
    if notes:
        note_axes = fig.add_subplot(grid[1, :])
        note_axes.axis("off")
        note_axes.text(0, 1, "\n".join(notes), va="top", ha="left", fontsize=8, color="0.3", style="italic",
                       transform=note_axes.transAxes)
    panel_row = 1 + bool(notes)
    first = None
    drawn = set(baselines(record))
    for column, (label, value, fmt) in enumerate(panels):
        axes = fig.add_subplot(grid[panel_row, column], sharey=first)
        first = first or axes
        values = [value(f) if f["status"] == "ok" else None for f in feeds]
        labels = None
        if label.startswith("peak memory"):
            labels = [_memory_label(f, v, fmt) for f, v in zip(feeds, values)]
        _bars(axes, feeds, values, fmt, drawn, labels)
        axes.set_xlabel(label, fontsize=8)
        axes.tick_params(labelsize=7)
        if column:
            axes.tick_params(labelleft=False)
    if timeline:
        _timeline(fig.add_subplot(grid[panel_row + 1, :]), timeline, names)
    return fig


def plot(record: dict[str, Any], path: Path) -> None:
    """Draw `record` into the PNG `path` (its folder made as needed)."""
    import matplotlib.pyplot as plt

    fig = draw(record)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _title(record: dict[str, Any]) -> str:
    settings, machine = record["settings"], record["machine"]
    gpu = f"; {machine['gpu']['name']}" if machine.get("gpu") else ""
    state = "" if record["complete"] else " — INCOMPLETE (interrupted)"
    return (f"iofeed bench {record['created'][:10]} — batch {settings['batch_size']}, {settings['image_size']} px, "
            f"model {settings['model']}, {settings['device']}, {settings['workers']} workers, "
            f"{settings['seconds_per_feed']:g} s per feed; {machine['cpu_model']}, {machine['cores']} cores{gpu}"
            f"{state}")


def _memory_label(feed: dict[str, Any], value: float | None, fmt: str) -> str:
    """A memory bar's label: its value, and how much of it is page cache (mapped files: a raw feed's
    shards) when that is most of it; for a record without that number, a raw feed's bar is said to be."""
    if value is None:
        return "—"
    text = format(value, fmt)
    files = feed.get("peak_memory_file_bytes")
    if files is not None and feed["peak_memory_bytes"] and files > PAGE_CACHE_SHARE * feed["peak_memory_bytes"]:
        return f"{text} ({format(files / MIB, fmt)} of it page cache: mapped files)"
    if files is None and feed["name"] in FEEDS and FEEDS.caps(feed["name"]).reads == "raw":
        return f"{text} (mostly page cache: the mapped raw shards)"
    return text


def _colour(feed: dict[str, Any], drawn: set[str]) -> str:
    if feed["status"] != "ok":
        return SKIPPED_COLOUR
    if feed["name"] in drawn:
        return BASELINE_COLOUR
    return CEILING_COLOUR if feed["kind"] == "synthetic" else FEED_COLOUR


def _bars(axes: Any, feeds: list[dict[str, Any]], values: list[float | None], fmt: str, drawn: set[str],
          labels: list[str] | None = None) -> None:
    """Horizontal bars in feed order, each labelled with `labels` (default: its value, "—" where none)."""
    from matplotlib.ticker import MaxNLocator

    heights = [0.0 if v is None else v for v in values]
    bars = axes.barh([f["name"] for f in feeds], heights, color=[_colour(f, drawn) for f in feeds])
    if labels is None:
        labels = ["—" if v is None else format(v, fmt.rstrip("%")) for v in values]
    axes.bar_label(bars, labels=labels, padding=3, fontsize=7)
    axes.set_xlim(0, 115 if fmt.endswith("%") else max(heights, default=0) * 1.3 or 1)  # "%": a share of 100
    axes.xaxis.set_major_locator(MaxNLocator(5, steps=[1, 2, 2.5, 5, 10]))
    if not axes.yaxis_inverted():
        axes.invert_yaxis()
    for tick, feed in zip(axes.get_yticklabels(), feeds):
        if feed["status"] != "ok":
            tick.set_color(SKIPPED_COLOUR)


def not_run_notes(feeds: list[dict[str, Any]]) -> list[str]:
    """Each feed that did not run with its whole reason, wrapped ("(1) iofeed-s3-cold skipped: ...");
    its bar says "see (1)": a reason cut to fit the bar's row lost what to do."""
    lines: list[str] = []
    for number, feed in enumerate((f for f in feeds if f["status"] != "ok"), 1):
        text = f"({number}) {feed['name']} {feed['status']}: {feed['reason']}"
        lines += textwrap.wrap(text, NOTE_CHARS, subsequent_indent="      ", break_on_hyphens=False)
    return lines


def window_spread(feed: dict[str, Any]) -> tuple[float, float] | None:
    """The slowest and fastest timed window's images/sec of a feed that ran (None with fewer than two)."""
    rates = [w["images_per_sec"] for w in feed.get("windows", [])]
    return (min(rates), max(rates)) if feed["status"] == "ok" and len(rates) >= 2 else None


def _rates(axes: Any, record: dict[str, Any]) -> None:
    """Images/sec per feed, each with a whisker from its slowest to its fastest window, labelled with
    the ratio to the baseline and that spread; a feed that did not run points at its note."""
    feeds, measured = record["feeds"], baselines(record)
    rates = [f["images_per_sec"] for f in feeds]
    numbers = iter(range(1, len(feeds) + 1))
    labels = [f"{f['status']}: see ({next(numbers)}) below" if f["status"] != "ok" else "" for f in feeds]
    _bars(axes, feeds, rates, ",.0f", set(measured), labels)
    for i, feed in enumerate(feeds):
        rate, spread = feed["images_per_sec"], window_spread(feed)
        if feed["status"] != "ok" or rate is None:
            continue
        if spread is not None:
            axes.errorbar(rate, i, xerr=[[max(rate - spread[0], 0)], [max(spread[1] - rate, 0)]], fmt="none",
                          ecolor="black", elinewidth=1, capsize=3)
        end = max(rate, spread[1]) if spread is not None else rate  # the label past the whisker
        axes.annotate("   ".join(_rate_words(feed, record["baseline"])), (end, i), xytext=(5, 0),
                      textcoords="offset points", va="center", fontsize=7)
    top = max((max(r, (window_spread(f) or (0, 0))[1]) for f, r in zip(feeds, rates) if r is not None), default=1)
    axes.set_xlim(0, top * 1.6)
    ceiling = (", green: synthetic data already on the device (the ceiling)"
               if any(f["kind"] == "synthetic" for f in feeds) else "")
    skipped = ", grey: did not run" if any(f["status"] != "ok" for f in feeds) else ""
    legend = f"; orange: the baseline{'s' if len(measured) > 1 else ''} ({', '.join(measured)})" if measured else ""
    axes.set_xlabel(f"images/sec over the timed windows (whiskers: slowest to fastest window){legend}{ceiling}"
                    f"{skipped}", fontsize=8)
    axes.tick_params(labelsize=8)


def _rate_words(feed: dict[str, Any], main: str) -> list[str]:
    """"3,930", "1.43x the baseline" (or "1.43x torchvision-recipe" against another baseline than the
    record's `main` one), "98% of the ceiling" (what the record holds of them)."""
    words = [f"{feed['images_per_sec']:,.0f}"]
    if feed["vs_baseline"] is not None:
        base = feed.get("baseline", main)
        words.append(f"{feed['vs_baseline']:.2f}x {'the baseline' if base == main else base}")
    ceiling = (feed.get("training") or {}).get("percent_of_ceiling")
    if ceiling is not None and feed["kind"] != "synthetic":
        words.append(f"{ceiling:.0f}% of the ceiling")
    spread = window_spread(feed)
    if spread is not None:
        words.append(f"windows {spread[0]:,.0f}–{spread[1]:,.0f}")
    return words


def _timeline(axes: Any, timeline: list[dict[str, Any]], names: list[str]) -> None:
    """GPU utilisation samples over time, one colour per feed, the legend outside the plot area."""
    for name in names:
        points = [(s["t"], s["util"]) for s in timeline if s["feed"] == name]
        if points:
            axes.scatter(*zip(*points), s=4, label=name)
    axes.set_xlabel("seconds since sampling began (feeds alternate in windows)", fontsize=8)
    axes.set_ylabel("GPU utilisation %", fontsize=8)
    axes.set_ylim(-3, 103)
    axes.tick_params(labelsize=7)
    axes.legend(fontsize=7, markerscale=3, loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0)
