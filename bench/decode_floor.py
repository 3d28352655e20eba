"""CPU time per image of the workers engine's per-sample step (decode, crop, resize, flip into a
slot): the full decode, `Recipe(region_decode=True)` at several thresholds, and
`Recipe(fast_decode=True)`: one process,
one core, the variants interleaved round by round so that a shared machine's load falls on all.

    PYTHONPATH=src .venv/bin/python bench/decode_floor.py DATASET [--images 400] [--rounds 9]

DATASET is an iofeed dataset (`iofeed preprocess`); its train split's first `--images` JPEGs are
read into memory first. Prints CPU us per image (median over rounds) and each variant's ratio to
the full decode, measured in the same round.
"""
from __future__ import annotations

import argparse
import os
import time

import numpy as np

from iofeed.engines.workers.decode import decode_augmented
from iofeed.image import region
from iofeed.image.boxes import Augment
from iofeed.sources.sample_reader import SampleReader
from iofeed.sources.samples import open_source

VARIANTS = {  # name: (Augment changes, region_ok, region.MAX_SHARE)
    "full decode, exact IDCT (before)": ({}, False, region.MAX_SHARE),
    f"region_decode=True: grown box <= {region.MAX_SHARE:.0%} of the image": ({"region_decode": True}, True,
                                                                             region.MAX_SHARE),
    "region_decode=True, grown box <= 20%": ({"region_decode": True}, True, 0.2),
    "region_decode=True, every crop": ({"region_decode": True}, True, 1.0),
    "full decode, fast_decode=True (after: the default)": ({"fast_decode": True}, False, region.MAX_SHARE),
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("dataset")
    parser.add_argument("--images", type=int, default=400)
    parser.add_argument("--rounds", type=int, default=9)
    parser.add_argument("--size", type=int, default=224)
    args = parser.parse_args()
    if hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})  # one core, as one worker
    source = open_source(args.dataset, "train")
    reader = SampleReader(source)
    datas = [reader.read(i) for i in range(min(args.images, len(source)))]
    out = np.empty((args.size, args.size, 3), np.uint8)
    cpu: dict[str, list[float]] = {name: [] for name in VARIANTS}
    ratio: dict[str, list[float]] = {name: [] for name in VARIANTS}
    load = os.getloadavg()[0]
    for round_ in range(args.rounds):
        base = None
        for name, (changes, region_ok, share) in VARIANTS.items():
            region.MAX_SHARE = share
            augment = Augment(size=args.size, **changes)
            rng = np.random.default_rng(round_)  # the same boxes for every variant
            began = time.process_time()
            for data in datas:
                decode_augmented(data, augment, rng, out, region_ok=region_ok)
            per_image = (time.process_time() - began) / len(datas) * 1e6
            base = per_image if base is None else base
            cpu[name].append(per_image)
            ratio[name].append(per_image / base)
    print(f"{len(datas)} images of {args.dataset}, {args.size} px, {args.rounds} rounds; region extra "
          f"{'installed' if region.installed() else 'missing'}; load average {load:.1f} before, "
          f"{os.getloadavg()[0]:.1f} after")
    print("| per-sample step | CPU us/img (median) | x full decode, same round (median) |")
    print("|---|---|---|")
    for name in VARIANTS:
        print(f"| {name} | {np.median(cpu[name]):.0f} | {np.median(ratio[name]):.3f} |")


if __name__ == "__main__":
    main()
