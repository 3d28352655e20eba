"""`iofeed inspect --mix SOURCE=WEIGHT ...`: what a mixture's epoch takes from each source, before
training on it."""
from __future__ import annotations

import argparse
from pathlib import Path

from ..errors import OptionError
from ..loading.mix_source import Mixture
from ..options.groups import Cache, Skips
from ..options.loader_options import LoaderOptions
from ..sources.mix import Mix


def inspect_mixture(args: argparse.Namespace) -> None:
    """`iofeed inspect --mix ...`; OptionError when a dataset or --verify comes with it, when neither is
    given, or when a mixture's options come without it."""
    if not args.mix and args.dataset is None:
        raise OptionError("inspect needs a dataset, or a mixture's sources: --mix SOURCE=WEIGHT (repeated)")
    if not args.mix:
        raise OptionError("--epoch-samples, --classes and --split describe a mixture: use them with --mix "
                          "SOURCE=WEIGHT, or leave them out to inspect one dataset")
    if args.dataset is not None or args.verify:
        raise OptionError("--mix inspects a mixture: leave out the dataset and --verify (inspect each source alone "
                          "for those)")
    print_mixture(parse_mix(args.mix, args.epoch_samples, args.classes), args.split)


def parse_mix(items: list[str], epoch_samples: int | None, classes: str) -> Mix:
    """A Mix from "SOURCE=WEIGHT" items (the last "=" splits, so a URL may hold one); OptionError
    naming a malformed item."""
    weights: dict[str, float] = {}
    for item in items:
        source, _, weight = item.rpartition("=")
        try:
            value = float(weight)
        except ValueError:
            value = None
        if not source or value is None:
            raise OptionError(f"--mix {item!r}: write SOURCE=WEIGHT, such as data/c256.iof=0.7")
        if source in weights:
            raise OptionError(f"--mix lists {source!r} twice: give each source once, with its total weight")
        weights[source] = value
    return Mix(weights, epoch_samples=epoch_samples, classes=classes)


def print_mixture(mix: Mix, split: str = "train", cache_dir: str | Path | None = None) -> None:
    """Each source's samples, weight, samples per epoch and how often its pass comes round."""
    mixture = Mixture(mix, split, LoaderOptions(batch_size=1, split=split, cache=Cache(dir=cache_dir),
                                                  skips=Skips(max_skipped=None)))
    rule = "merged by name" if mix.classes == "name" else "one source after another (offset)"
    print(f"{mix}")
    print(f"  split         {split}: {len(mixture.data):,} samples, {len(mixture.data.classes):,} classes {rule}")
    if split != "train":
        for name, size in zip(mixture.names, mixture.sizes):
            print(f"  source        {name}: {size:,} samples, read whole in this order (weights do not apply)")
        return
    print(f"  epoch         {mixture.plan.epoch_samples:,} samples")
    for name, size, count, weight in zip(mixture.names, mixture.sizes, mixture.plan.counts, mix.weights.values()):
        passes = count / size
        cycle = (f"{passes:.2f} passes an epoch (repeats, a fresh permutation each pass)" if passes > 1 else
                 f"one pass every {1 / passes:.2f} epochs (continues where it stopped)" if passes < 1 else
                 "one pass an epoch")
        print(f"  source        {name}: {size:,} samples, weight {weight:g}, {count:,} per epoch: {cycle}")
