"""Results: the JSON record (see `schema`), the terminal table, and writing the file."""
from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from .feeds import BASELINE, CEILING, RECIPE_BASELINE, baseline_of
from .measure import FeedRun
from .schema import FORMAT, VERSION, validate


def _rate(run: FeedRun) -> float | None:
    seconds = sum(w.timed.seconds for w in run.windows)
    return sum(w.timed.images for w in run.windows) / seconds if run.status == "ok" and seconds > 0 else None


def feed_record(run: FeedRun, image_size: int, baseline: float | None, ceiling: float | None,
                gpu: Any = None, baseline_name: str = BASELINE) -> dict[str, Any]:
    """One feed's entry in the results file (`baseline`: the rate of the feed `baseline_name`)."""
    rate = _rate(run)
    images = sum(w.timed.images for w in run.windows)
    seconds = sum(w.timed.seconds for w in run.windows)
    busy = [sum(core) for core in zip(*(w.cpu.core_busy for w in run.windows))]
    total = [sum(core) for core in zip(*(w.cpu.core_total for w in run.windows))]
    cores = [100.0 * b / t if t > 0 else 0.0 for b, t in zip(busy, total)]
    feed_cpu = sum(w.cpu.feed for w in run.windows)
    other_cpu = sum(w.cpu.other for w in run.windows)
    training = None
    if run.spec.model != "none" and rate is not None:
        wait = sum(w.timed.wait_seconds for w in run.windows)
        training = {"model": run.spec.model, "data_wait_fraction": wait / seconds,
                    "gpu_util_mean": gpu.mean(run.spec.name) if gpu is not None else None,
                    "percent_of_ceiling": 100.0 * rate / ceiling if ceiling else None}
    return {
        "name": run.spec.name, "about": run.spec.entry.about, "kind": run.spec.entry.kind,
        "source": run.spec.source or None, "status": run.status, "reason": run.reason,
        "workers": run.spec.workers if run.spec.entry.kind != "synthetic" else None,
        "prefetch_batches": run.capacity, "settings": run.settings,
        "images": images, "batches": sum(w.timed.batches for w in run.windows), "seconds": seconds,
        "images_per_sec": rate,
        "mpix_per_sec": rate * image_size**2 / 1e6 if rate is not None else None,
        "vs_baseline": rate / baseline if rate is not None and baseline else None,
        "baseline": baseline_name,
        "cpu_percent_per_core": cores, "cpu_percent": sum(cores) / len(cores) if cores else None,
        "cpu_ms_per_image": 1000.0 * feed_cpu / images if images else None,
        "worker_cpu_ms_per_image": 1000.0 * sum(w.cpu.children for w in run.windows) / images if images else None,
        "other_cpu_percent": 100.0 * other_cpu / sum(total) if sum(total) > 0 else None,
        "peak_memory_bytes": run.peak_memory_bytes if run.status == "ok" else None,
        "peak_memory_file_bytes": run.peak_file_bytes if run.status == "ok" else None,
        "processes": run.processes if run.status == "ok" else None,
        "max_memory_reserved_bytes": run.max_memory_reserved_bytes,
        "warmup": None if run.warmup is None else
        {"images": run.warmup.images, "batches": run.warmup.batches, "seconds": run.warmup.seconds},
        "windows": [{"round": w.round, "images": w.timed.images, "batches": w.timed.batches,
                     "seconds": w.timed.seconds, "images_per_sec": w.timed.images / w.timed.seconds,
                     "drained_images": w.drained.images, "drained_batches": w.drained.batches,
                     "other_cpu_percent": 100.0 * w.cpu.other_share}
                    for w in run.windows],
        "training": training,
    }


def feed_records(runs: list[FeedRun], image_size: int, gpu: Any = None) -> list[dict[str, Any]]:
    """Every feed's entry, with the ratio to its baseline (`baseline_of`) and the share of the ceiling."""
    rates = {run.spec.name: _rate(run) for run in runs}
    return [feed_record(run, image_size, rates.get(baseline_of(run.spec.name)), rates.get(CEILING), gpu,
                        baseline_of(run.spec.name)) for run in runs]


def build_record(**parts: Any) -> dict[str, Any]:
    """The whole results document (keys as in `schema.SCHEMA`)."""
    return {"format": FORMAT, "version": VERSION, **parts}


def write_json(record: dict[str, Any], path: Path) -> None:
    """Check `record` against the schema, then write it atomically (a reader, or a run killed
    mid-write, sees the previous version or this one, never half of one; folders made as needed)."""
    problems = validate(record)
    if problems:
        raise ValueError("benchmark record breaks its schema: " + "; ".join(problems[:5]))
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    temporary.write_text(json.dumps(record, indent=2) + "\n", encoding="utf-8")
    os.replace(temporary, path)


NOISY_PERCENT = 10.0  # other processes' share of the machine above which a window is flagged


def disturbance(record: dict[str, Any]) -> str | None:
    """One line saying that other processes took more than `NOISY_PERCENT` of the machine in some
    timed windows (the rates are then lower than on a quiet machine), or None for a quiet run."""
    windows = [w for f in record["feeds"] for w in f["windows"]]
    busy = [w["other_cpu_percent"] for w in windows if w["other_cpu_percent"] > NOISY_PERCENT]
    if not busy:
        return None
    return (f"disturbed run: other processes took up to {max(busy):.0f}% of the machine in {len(busy)} of the "
            f"{len(windows)} timed windows; the rates are lower than on a quiet machine")


def all_failed(record: dict[str, Any]) -> str | None:
    """The line to end with when no feed was measured and at least one failed (the run then exits
    non-zero: a script or CI reading the status saw success); None when any feed ran, or every
    one was only skipped as unable to run here."""
    statuses = [f["status"] for f in record["feeds"]]
    if "ok" in statuses or "failed" not in statuses:
        return None
    failed = [f["name"] for f in record["feeds"] if f["status"] == "failed"]
    return (f"no feed was measured: {', '.join(failed)} failed (the reasons are in the table above"
            f"{' and ' + str(statuses.count('skipped')) + ' skipped' if 'skipped' in statuses else ''})")


def baselines(record: dict[str, Any]) -> list[str]:
    """The baselines some feed of the record is compared with and that were measured, in feed order."""
    measured = {f["name"] for f in record["feeds"] if f["status"] == "ok"}
    used = dict.fromkeys(f.get("baseline", record["baseline"]) for f in record["feeds"])
    return [base for base in used if base in measured]


def _num(value: float | None, fmt: str) -> str:
    return "—" if value is None else format(value, fmt)


def table(record: dict[str, Any]) -> str:
    """The results as a fixed-width text table (one row per feed)."""
    training = record["settings"]["model"] != "none"
    measured = baselines(record)
    head = ["feed", "workers", "img/s", "x baseline", "MPix/s", "core busy %", "CPU ms/img", "workers ms/img",
            "other CPU %", "peak MiB"]
    if training:
        head += ["GPU util %", "data wait %", "% of ceiling"]
    gpu_memory = any(feed["max_memory_reserved_bytes"] is not None for feed in record["feeds"])
    if gpu_memory:
        head += ["GPU reserved MiB"]
    rows: list[list[str]] = [head]  # [name, why]: a feed that did not run, with the reason on its row
    notes = []
    for feed in record["feeds"]:
        if feed["status"] != "ok":
            rows.append([feed["name"], f"{feed['status']}: {feed['reason']}"])
            continue
        row = [feed["name"], _num(feed["workers"], "d"), _num(feed["images_per_sec"], ",.0f"),
               _num(feed["vs_baseline"], ".2f"), _num(feed["mpix_per_sec"], ".1f"),
               "/".join(f"{c:.0f}" for c in feed["cpu_percent_per_core"]), _num(feed["cpu_ms_per_image"], ".2f"),
               _num(feed.get("worker_cpu_ms_per_image"), ".3f"),
               _num(feed["other_cpu_percent"], ".0f"),
               _num(None if feed["peak_memory_bytes"] is None else feed["peak_memory_bytes"] / 2**20, ",.0f")]
        if training:
            t = feed["training"] or {}
            row += [_num(t.get("gpu_util_mean"), ".0f"), _num(100 * t.get("data_wait_fraction", 0), ".0f"),
                    _num(t.get("percent_of_ceiling"), ".0f")]
        if gpu_memory:
            reserved = feed["max_memory_reserved_bytes"]
            row += [_num(None if reserved is None else reserved / 2**20, ",.0f")]
        rows.append(row)
        busy = [w for w in feed["windows"] if w["other_cpu_percent"] > NOISY_PERCENT]
        if busy:
            notes.append(f"  {feed['name']}: other processes used "
                         + ", ".join(f"{w['other_cpu_percent']:.0f}%" for w in busy)
                         + f" of the machine in {len(busy)} of its {len(feed['windows'])} windows")
    widths = [max(len(r[i]) for r in rows if len(r) == len(head) or i == 0) for i in range(len(head))]
    lines = [f"{r[0].ljust(widths[0])}  {r[1]}" if len(r) == 2 else
             "  ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(r, widths)))
             for r in rows]
    lines.insert(1, "  ".join("-" * w for w in widths))
    compared = ", ".join(f"{base}'s{' (the recipe feeds)' if base == RECIPE_BASELINE else ''}" for base in measured)
    notes[:0] = [f"  x baseline: img/s over {compared or 'a baseline (none was measured: —)'};",
                 "  core busy %: each core of the machine (0/1/...) busy while the feed was timed; "
                 "CPU ms/img: CPU time of the feed's own processes per image;",
                 "  workers ms/img: of that, its worker processes' (iofeed-nvjpeg's: reading and packing JPEG bytes "
                 "alone, the target <= 0.1);",
                 "  other CPU %: the machine's CPU used by other processes; peak MiB: the feed's processes' memory "
                 f"({record['settings']['memory_metric']})"]
    if record["settings"].get("task") == "detection":
        notes += [f"  {note}" for note in record["inputs"]["notes"]]
    if disturbance(record):
        notes.append(f"  {disturbance(record)}")
    if not record["complete"]:
        notes.append("  incomplete: interrupted; the windows above are those measured before it stopped")
    return "\n".join(lines + notes)
