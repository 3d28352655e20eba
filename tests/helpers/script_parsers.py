"""Stand-ins for the argument parsers of the training scripts the framework pages change: the flags
that reach their data loading, with the real scripts' names, types and defaults (timm 1.0's
`train.py`; torchvision's `references/classification/train.py`). The scripts are not installed
with their packages, so the tests parse their command lines with these."""
from __future__ import annotations

import argparse


def timm_train_parser() -> argparse.ArgumentParser:
    """timm `train.py`'s dataset, model-input and augmentation flags."""
    p = argparse.ArgumentParser()
    p.add_argument("data_dir", nargs="?", default="")
    p.add_argument("--train-split", default="train")
    p.add_argument("--val-split", default="validation")
    p.add_argument("--model", default="resnet50")
    p.add_argument("--num-classes", type=int, default=None)
    p.add_argument("--img-size", type=int, default=None)
    p.add_argument("--input-size", default=None, nargs=3, type=int)
    p.add_argument("--crop-pct", default=None, type=float)
    p.add_argument("--mean", type=float, nargs="+", default=None)
    p.add_argument("--std", type=float, nargs="+", default=None)
    p.add_argument("--interpolation", default="", type=str)
    p.add_argument("-b", "--batch-size", type=int, default=128)
    p.add_argument("-vb", "--validation-batch-size", type=int, default=None)
    p.add_argument("--no-aug", action="store_true", default=False)
    p.add_argument("--train-crop-mode", type=str, default=None)
    p.add_argument("--scale", type=float, nargs="+", default=[0.08, 1.0])
    p.add_argument("--ratio", type=float, nargs="+", default=[3. / 4., 4. / 3.])
    p.add_argument("--hflip", type=float, default=0.5)
    p.add_argument("--vflip", type=float, default=0.)
    p.add_argument("--color-jitter", type=float, default=0.4)
    p.add_argument("--color-jitter-prob", type=float, default=None)
    p.add_argument("--grayscale-prob", type=float, default=None)
    p.add_argument("--gaussian-blur-prob", type=float, default=None)
    p.add_argument("--aa", type=str, default=None)
    p.add_argument("--aug-repeats", type=float, default=0)
    p.add_argument("--aug-splits", type=int, default=0)
    p.add_argument("--reprob", type=float, default=0.)
    p.add_argument("--remode", type=str, default="pixel")
    p.add_argument("--recount", type=int, default=1)
    p.add_argument("--resplit", action="store_true", default=False)
    p.add_argument("--mixup", type=float, default=0.0)
    p.add_argument("--cutmix", type=float, default=0.0)
    p.add_argument("--cutmix-minmax", type=float, nargs="+", default=None)
    p.add_argument("--smoothing", type=float, default=0.1)
    p.add_argument("--train-interpolation", type=str, default="random")
    p.add_argument("--no-prefetcher", action="store_true", default=False)
    p.add_argument("--workers", "-j", type=int, default=4)
    return p


def timm_args(argv: list[str]) -> argparse.Namespace:
    """Parsed as train.py does it, `args.prefetcher` included (set after parsing there)."""
    args = timm_train_parser().parse_args(argv)
    args.prefetcher = not args.no_prefetcher
    return args


def torchvision_train_parser() -> argparse.ArgumentParser:
    """torchvision `references/classification/train.py`'s data flags."""
    p = argparse.ArgumentParser()
    p.add_argument("--data-path", default="/datasets01/imagenet_full_size/061417/", type=str)
    p.add_argument("--model", default="resnet18", type=str)
    p.add_argument("--device", default="cuda", type=str)
    p.add_argument("-b", "--batch-size", default=32, type=int)
    p.add_argument("-j", "--workers", default=16, type=int)
    p.add_argument("--label-smoothing", default=0.0, type=float, dest="label_smoothing")
    p.add_argument("--mixup-alpha", default=0.0, type=float)
    p.add_argument("--cutmix-alpha", default=0.0, type=float)
    p.add_argument("--auto-augment", default=None, type=str)
    p.add_argument("--ra-magnitude", default=9, type=int)
    p.add_argument("--augmix-severity", default=3, type=int)
    p.add_argument("--random-erase", default=0.0, type=float)
    p.add_argument("--interpolation", default="bilinear", type=str)
    p.add_argument("--val-resize-size", default=256, type=int)
    p.add_argument("--val-crop-size", default=224, type=int)
    p.add_argument("--train-crop-size", default=224, type=int)
    p.add_argument("--ra-sampler", action="store_true")
    p.add_argument("--ra-reps", default=3, type=int)
    p.add_argument("--weights", default=None, type=str)
    p.add_argument("--test-only", dest="test_only", action="store_true")
    p.add_argument("--backend", default="PIL", type=str.lower)
    p.add_argument("--use-v2", action="store_true")
    return p
