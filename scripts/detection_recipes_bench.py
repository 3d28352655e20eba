"""Images per second of the detection recipes against `augment="detection"` (the random-resized
crop), measured in the same run: COCO stand-in, boxes and masks, one worker, windows of at least
`--window` seconds after a warm-up. Prints each recipe's rate and its ratio to the crop's.

    PYTHONPATH=src python scripts/detection_recipes_bench.py --images 64 --size 320 --window 10
"""
from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import iofeed
from iofeed.prepare.run import preprocess
from iofeed.prepare.synth_coco import synth_coco

RECIPES = ("detection", "yolo", "detr", "torchvision-detection")


def rate(dataset: Path, preset: str, size: int, window: float) -> float:
    """Images per second over at least `window` seconds, after one warm-up batch."""
    loader = iofeed.loader(dataset, batch_size=16, framework="numpy", image_size=size, workers=1, seed=0,
                           augment=iofeed.Recipe.preset(preset, normalize=False),
                           output=iofeed.Output(target="masks"))
    try:
        batches = iter(loader)
        next(batches)
        images, start = 0, time.perf_counter()
        while time.perf_counter() - start < window:
            for batch, _ in batches:
                images += len(batch)
                if time.perf_counter() - start >= window:
                    break
            else:
                batches = iter(loader)
        return images / (time.perf_counter() - start)
    finally:
        loader.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--images", type=int, default=64)
    parser.add_argument("--size", type=int, default=320)
    parser.add_argument("--window", type=float, default=10.0)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        synth_coco(root / "src", images=args.images, seed=1)
        preprocess(root / "src", root / "c.iof", workers=1, progress=False, val_fraction=0)
        rates = {preset: rate(root / "c.iof", preset, args.size, args.window) for preset in RECIPES}
        rates["detection (again)"] = rate(root / "c.iof", "detection", args.size, args.window)
    base = (rates["detection"] + rates["detection (again)"]) / 2
    for preset, value in rates.items():
        print(f"{preset:24s} {value:8.1f} img/s  {value / base:5.2f}x the crop")


if __name__ == "__main__":
    main()
