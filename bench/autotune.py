"""Autotuning benchmark: a consumer throttled to known rates; which worker count does the
engine settle on, how fast, and does the consumer still wait?

    .venv/bin/python bench/autotune.py data/c256 --rates 300 1200 --seconds 12

Writes bench/results/autotune.json and autotune.png.
"""
from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import iofeed


def run_rate(source: Path, rate: float, seconds: float, batch_size: int) -> dict:
    """Consume at about `rate` img/s for `seconds`; sample workers and waiting every batch."""
    timeline = []
    with iofeed.loader(source, batch_size=batch_size, workers=None) as ld:
        start = time.perf_counter()
        last_wait, last_images, last_t = 0.0, 0, start
        while time.perf_counter() - start < seconds:
            for _images, labels in ld:
                time.sleep(len(labels) / rate)
                now = time.perf_counter()
                if now - last_t >= 0.5:
                    stats = ld.stats
                    timeline.append({
                        "t": now - start,
                        "workers": ld.engine.workers,
                        "images_per_sec": (stats.images - last_images) / (now - last_t),
                        "wait_share": (stats.wait_seconds - last_wait) / (now - last_t),
                    })
                    last_wait, last_images, last_t = stats.wait_seconds, stats.images, now
                if now - start >= seconds:
                    break
        settled = timeline[-1]["workers"]
        settle_t = next(p["t"] for p in timeline if all(q["workers"] == settled for q in timeline if q["t"] >= p["t"]))
        tail = [p for p in timeline if p["t"] >= settle_t]
        return {
            "consumer_rate": rate,
            "settled_workers": settled,
            "max_workers": ld.engine.max_workers,
            "settled_after_seconds": settle_t,
            "wait_share_after_settling": sum(p["wait_share"] for p in tail) / len(tail),
            "images_per_sec_after_settling": sum(p["images_per_sec"] for p in tail) / len(tail),
            "decisions": ld.engine.decisions,
            "timeline": timeline,
        }


def plot(results: list[dict], path: Path) -> None:
    """Worker count and wait share over time, one line per consumer rate."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (top, bottom) = plt.subplots(2, 1, sharex=True, figsize=(8, 5))
    for r in results:
        t = [p["t"] for p in r["timeline"]]
        top.step(t, [p["workers"] for p in r["timeline"]], where="post",
                 label=f"consumer {r['consumer_rate']:.0f} img/s")
        bottom.plot(t, [100 * p["wait_share"] for p in r["timeline"]])
    top.set_ylabel("workers")
    top.legend()
    bottom.set_ylabel("consumer waiting (%)")
    bottom.set_xlabel("seconds")
    fig.suptitle("iofeed autotuning: workers settle to the consumer's rate")
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("source", type=Path)
    parser.add_argument("--rates", type=float, nargs="+", default=[300.0, 1200.0])
    parser.add_argument("--seconds", type=float, default=12.0)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--out", type=Path, default=Path("bench/results"))
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    results = [run_rate(args.source, rate, args.seconds, args.batch_size) for rate in args.rates]
    (args.out / "autotune.json").write_text(json.dumps(results, indent=2) + "\n")
    plot(results, args.out / "autotune.png")
    for r in results:
        print(f"consumer {r['consumer_rate']:>6.0f} img/s -> {r['settled_workers']} of {r['max_workers']} workers "
              f"after {r['settled_after_seconds']:.1f} s; then waiting {r['wait_share_after_settling']:.1%}, "
              f"delivering {r['images_per_sec_after_settling']:,.0f} img/s")


if __name__ == "__main__":
    main()
