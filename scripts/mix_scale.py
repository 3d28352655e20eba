"""Time to the first batch and memory of a two-source Mix with a LAION-scale epoch, against each
of its sources read alone (issue 39.5).

    python scripts/mix_scale.py --work /tmp/mix-scale [--epoch-samples 1000000000] [--rounds 3]
    python scripts/mix_scale.py A.iof B.iof --epoch-samples 1000000000

Without datasets it writes two (`--images` colour pictures each, 64-96 px JPEGs in 4 classes,
different sizes so that one is up-sampled) under `--work` once. Each measurement runs in its own
child process: import iofeed, make `iofeed.loader(source, framework="numpy", workers=1)`, take
its first batch, and report the seconds from the loader call to that batch and the process's RSS
grown meanwhile (current, and its peak over the RSS at the start: an upper bound). Sources: A
alone, B alone, and Mix({A: 1, B: 1}, epoch_samples=N). Prints each round, the medians, the
ratio of the Mix's time to the slower source's, and the Mix's memory over each source's (goals:
<= 1.5x, < 100 MiB).
"""
from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
from pathlib import Path

CHILD = r"""
import json, resource, sys, time
import iofeed

def rss():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * resource.getpagesize()

spec = json.loads(sys.argv[1])
source = iofeed.Mix(spec["mix"], epoch_samples=spec["epoch_samples"]) if "mix" in spec else spec["path"]
before = rss()
start = time.perf_counter()
with iofeed.loader(source, batch_size=spec["batch"], framework="numpy", workers=1, image_size=64, seed=1) as ld:
    images, labels = next(iter(ld))
    seconds = time.perf_counter() - start
    grown = rss() - before
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 - before  # an upper bound: imports may peak higher
    batches = len(ld)
print(json.dumps({"seconds": seconds, "rss_grown": grown, "peak_grown": peak, "batches": batches}))
"""


def make_dataset(root: Path, images: int, seed: int) -> Path:
    """A 4-class colour dataset of `images` small JPEGs, preprocessed once into `root`/data.iof."""
    import io

    import numpy as np
    from PIL import Image

    from iofeed.prepare.run import preprocess

    out = root / "data.iof"
    if out.exists():
        return out
    rng = np.random.default_rng(seed)
    colours = [(200, 40, 40), (40, 200, 40), (40, 40, 200), (220, 220, 40)]
    for i in range(images):
        c = i % 4
        folder = root / "tree" / f"{c:03d}.colour{c}"
        folder.mkdir(parents=True, exist_ok=True)
        h, w = int(rng.integers(64, 97)), int(rng.integers(64, 97))
        pixels = np.clip(np.array(colours[c]) + rng.integers(-12, 13, (h, w, 3)), 0, 255).astype(np.uint8)
        buffer = io.BytesIO()
        Image.fromarray(pixels).save(buffer, "JPEG", quality=85)
        (folder / f"{i:06d}.jpg").write_bytes(buffer.getvalue())
    preprocess(root / "tree", out, val_per_class=1, progress=False, workers=1)
    return out


def measure(spec: dict) -> dict:
    run = subprocess.run([sys.executable, "-c", CHILD, json.dumps(spec)], capture_output=True, text=True, check=False)
    if run.returncode:
        raise SystemExit(f"child failed for {spec}: {run.stderr.strip()[-2000:]}")
    return json.loads(run.stdout.strip().splitlines()[-1])


def order_cost(epoch_samples: int) -> None:
    """The mixture order alone (no images): seconds to its first stretch, and per sample over blocks."""
    import time

    try:
        from iofeed.sources.mix import MixPlan, shares
    except ImportError:  # the layout before the packages (issue 40)
        from iofeed.mix import MixPlan, shares

    try:
        from iofeed.sources.mix_order import LEAF
    except ImportError:  # the order before issue 39: made whole
        LEAF = epoch_samples
    plan = MixPlan((4000, 2000), tuple(shares([1.0, 1.0], epoch_samples)))
    start = time.perf_counter()
    first = plan.take(1, 0, 0, 256) if hasattr(plan, "take") else plan.order(1, 0)[:256]
    took = time.perf_counter() - start
    blocks = min(8, -(-epoch_samples // LEAF))
    start = time.perf_counter()
    if hasattr(plan, "take"):
        for b in range(1, blocks + 1):
            plan.take(1, 0, b * LEAF, (b + 1) * LEAF)
    per = (time.perf_counter() - start) / max(min(blocks * LEAF, epoch_samples), 1)
    print(f"order alone: first {len(first)} samples in {took * 1000:.1f} ms; then {per * 1e9:.0f} ns a sample")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("datasets", nargs="*", type=Path, help="two datasets (default: made under --work)")
    parser.add_argument("--work", type=Path, default=Path("/tmp/mix-scale"))
    parser.add_argument("--images", type=int, default=4000, help="images per made dataset (the second gets half)")
    parser.add_argument("--epoch-samples", type=int, default=10**9)
    parser.add_argument("--batch", type=int, default=256)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    if args.datasets and len(args.datasets) != 2:
        parser.error("give two datasets, or none")
    a, b = args.datasets or [make_dataset(args.work / "a", args.images, 1),
                             make_dataset(args.work / "b", args.images // 2, 2)]
    specs = {"A alone": {"path": str(a), "batch": args.batch}, "B alone": {"path": str(b), "batch": args.batch},
             "Mix": {"mix": {str(a): 1, str(b): 1}, "epoch_samples": args.epoch_samples, "batch": args.batch}}
    results: dict[str, list[dict]] = {name: [] for name in specs}
    for r in range(args.rounds):
        for name, spec in specs.items():
            got = measure(spec)
            results[name].append(got)
            print(f"round {r + 1} {name:8s} first batch {got['seconds']:.3f} s, RSS +{got['rss_grown'] / 2**20:.1f} "
                  f"MiB (peak +{got['peak_grown'] / 2**20:.1f}), {got['batches']:,} batches an epoch", flush=True)
    order_cost(args.epoch_samples)
    med = {name: {key: statistics.median(g[key] for g in runs) for key in ("seconds", "rss_grown", "peak_grown")}
           for name, runs in results.items()}
    slower = max(med["A alone"]["seconds"], med["B alone"]["seconds"])
    print(f"medians: A {med['A alone']['seconds']:.3f} s, B {med['B alone']['seconds']:.3f} s, "
          f"Mix(epoch_samples={args.epoch_samples:,}) {med['Mix']['seconds']:.3f} s")
    print(f"first batch: Mix / slower source alone = {med['Mix']['seconds'] / slower:.2f}x (goal <= 1.5x)")
    for key, what in (("rss_grown", "RSS"), ("peak_grown", "peak RSS")):
        over = med["Mix"][key] - max(med["A alone"][key], med["B alone"][key])
        both = med["Mix"][key] - med["A alone"][key] - med["B alone"][key]
        print(f"{what}: Mix +{med['Mix'][key] / 2**20:.1f} MiB, over the larger source alone {over / 2**20:+.1f} MiB, "
              f"over both sources' {both / 2**20:+.1f} MiB (goal < 100 MiB)")


if __name__ == "__main__":
    main()
