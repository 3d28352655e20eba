"""The GPU check's results against issue 37's targets (and issue 30's for the workers engine), one line
per feed (run by gpu-session.sh).

    python scripts/gpu_summary.py RESULTS_DIR PREFIX     # reads PREFIX-{resnet18,resnet50,loader}.json

A result that is missing (its step failed or was cut off) or a target missed is said with its
number; nothing here fails the run.
"""
from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

# (results file, feed, what is measured, bound, unit): % of the ceiling for the models, img/s alone,
# CPU ms per image ("ms/img": at most the bound)
TARGETS = [
    ("loader", "iofeed-nvjpeg", "the loader alone, GPU-decode engine", 20_000.0, "img/s"),
    ("loader", "iofeed-nvjpeg", "CPU per image, GPU-decode engine", 0.1, "ms/img"),
    ("resnet18", "iofeed-nvjpeg", "ResNet-18, GPU-decode engine", 90.0, "% of ceiling"),
    ("resnet50", "iofeed-nvjpeg", "ResNet-50, GPU-decode engine", 98.0, "% of ceiling"),
    ("resnet18", "iofeed-dataset", "ResNet-18, workers engine (issue 30)", 80.0, "% of ceiling"),
    ("resnet50", "iofeed-dataset", "ResNet-50, workers engine (issue 30)", 98.0, "% of ceiling"),
]


def _num(value: float | None, spec: str) -> str:
    return "-" if value is None else format(value, spec)


def feed_lines(name: str, record: dict[str, Any]) -> list[str]:
    """One line per feed: img/s, % of the ceiling, GPU utilisation, CPU ms per image, status."""
    cores = record.get("machine", {}).get("cores")
    lines = [f"{name}: model {record['settings']['model']}, batch {record['settings']['batch_size']}, "
             f"{record['settings']['device']}, {cores} cores, {'complete' if record.get('complete') else 'INCOMPLETE'}"]
    for feed in record["feeds"]:
        training = feed.get("training") or {}
        lines.append(f"  {feed['name']:<16} {_num(feed['images_per_sec'], '8.0f')} img/s  "
                     f"{_num(training.get('percent_of_ceiling'), '5.1f')}% of ceiling  "
                     f"GPU {_num(training.get('gpu_util_mean'), '3.0f')}%  "
                     f"CPU {_num(feed['cpu_ms_per_image'], '.3f')} ms/image  {feed['status']}"
                     + (f" ({feed['reason']})" if feed.get("reason") else ""))
    return lines


def target_lines(records: dict[str, dict[str, Any] | None]) -> list[str]:
    """One line per target: met, missed (with the number) or not measured."""
    lines = []
    for name, feed_name, what, bound, unit in TARGETS:
        sign = "<=" if unit == "ms/img" else ">="
        record = records.get(name)
        feed = next((f for f in (record or {}).get("feeds", []) if f["name"] == feed_name), None)
        if feed is None or feed["images_per_sec"] is None:
            why = "no results file" if record is None else (feed or {}).get("reason") or "not measured"
            lines.append(f"  NOT MEASURED  {what} {sign} {bound:g} {unit}: {why}")
            continue
        value = {"img/s": feed["images_per_sec"], "ms/img": feed.get("cpu_ms_per_image")}.get(
            unit, (feed.get("training") or {}).get("percent_of_ceiling"))
        gpu = (feed.get("training") or {}).get("gpu_util_mean")
        if value is None:
            lines.append(f"  NOT MEASURED  {what} {sign} {bound:g} {unit}: no model or no ceiling in this run")
            continue
        met = value <= bound if unit == "ms/img" else value >= bound
        shown = _num(value, ".3g" if unit == "ms/img" else ".1f")
        lines.append(f"  {'met   ' if met else 'MISSED'}        {what}: {shown} {unit} (target {sign} {bound:g})"
                     + (f", GPU {gpu:.0f}%" if gpu is not None else "")
                     + f", CPU {_num(feed['cpu_ms_per_image'], '.3f')} ms/image")
    return lines


def layout_line(record: dict[str, Any] | None) -> str:
    """The torch adapter's default layout (iofeed-nchw) against channels_last (iofeed-dataset) on the
    device, loader alone: the default written in the normalising kernel costs no pass (issue 42)."""
    rates = {f["name"]: f["images_per_sec"] for f in (record or {}).get("feeds", [])}
    default, channels_last = rates.get("iofeed-nchw"), rates.get("iofeed-dataset")
    if not default or not channels_last:
        return "  NOT MEASURED  default layout / channels_last >= 0.97, loader alone: a feed is missing"
    ratio = default / channels_last
    return (f"  {'met   ' if ratio >= 0.97 else 'MISSED'}        default layout / channels_last, loader alone: "
            f"{ratio:.3f} (target >= 0.97; {default:.0f} / {channels_last:.0f} img/s)")


def main(folder: Path, prefix: str) -> None:
    records: dict[str, dict[str, Any] | None] = {}
    for name in ("resnet18", "resnet50", "loader"):
        path = folder / f"{prefix}-{name}.json"
        records[name] = json.loads(path.read_text()) if path.exists() else None
        print(*(feed_lines(name, records[name]) if records[name] else [f"{name}: no results ({path.name})"]),
              sep="\n")
    print("targets (issue 37; the workers engine's from issue 30):", *target_lines(records),
          layout_line(records["loader"]), sep="\n")


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit("usage: python scripts/gpu_summary.py RESULTS_DIR PREFIX")
    main(Path(sys.argv[1]), sys.argv[2])
