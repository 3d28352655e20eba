"""The GPU check's results against issue 30's targets, one line per feed (run by gpu-session.sh).

    python scripts/gpu_summary.py RESULTS_DIR PREFIX     # reads PREFIX-{resnet18,resnet50,loader}.json

A result that is missing (its step failed or was cut off) or a target missed is said with its
number; nothing here fails the run.
"""
from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

# (results file, feed, what is measured, bound, unit): % of the ceiling for the models, img/s alone
TARGETS = [
    ("resnet18", "iofeed-dataset", "ResNet-18 from the JPEG dataset", 80.0, "% of ceiling"),
    ("resnet18", "iofeed-raw-gpu", "ResNet-18 from raw pixels + gpu_augment", 95.0, "% of ceiling"),
    ("resnet50", "iofeed-dataset", "ResNet-50 from the JPEG dataset", 98.0, "% of ceiling"),
    ("resnet50", "iofeed-raw", "ResNet-50 from raw pixels", 98.0, "% of ceiling"),
    ("loader", "iofeed-dataset", "the loader alone from JPEG", 10_000.0, "img/s"),
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
        record = records.get(name)
        feed = next((f for f in (record or {}).get("feeds", []) if f["name"] == feed_name), None)
        if feed is None or feed["images_per_sec"] is None:
            why = "no results file" if record is None else (feed or {}).get("reason") or "not measured"
            lines.append(f"  NOT MEASURED  {what} >= {bound:g} {unit}: {why}")
            continue
        value = feed["images_per_sec"] if unit == "img/s" else (feed.get("training") or {}).get("percent_of_ceiling")
        gpu = (feed.get("training") or {}).get("gpu_util_mean")
        if value is None:
            lines.append(f"  NOT MEASURED  {what} >= {bound:g} {unit}: no model or no ceiling in this run")
            continue
        verdict = "met   " if value >= bound else "MISSED"
        lines.append(f"  {verdict}        {what}: {_num(value, '.1f')} {unit} (target >= {bound:g})"
                     + (f", GPU {gpu:.0f}%" if gpu is not None else "")
                     + f", CPU {_num(feed['cpu_ms_per_image'], '.3f')} ms/image")
    return lines


def main(folder: Path, prefix: str) -> None:
    records: dict[str, dict[str, Any] | None] = {}
    for name in ("resnet18", "resnet50", "loader"):
        path = folder / f"{prefix}-{name}.json"
        records[name] = json.loads(path.read_text()) if path.exists() else None
        print(*(feed_lines(name, records[name]) if records[name] else [f"{name}: no results ({path.name})"]),
              sep="\n")
    print("targets (issue 30):", *target_lines(records), sep="\n")


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit("usage: python scripts/gpu_summary.py RESULTS_DIR PREFIX")
    main(Path(sys.argv[1]), sys.argv[2])
