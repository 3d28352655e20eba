"""The `iofeed` command's argument parser: every subcommand, its options and their help."""
from __future__ import annotations

import argparse
import textwrap
from pathlib import Path

from .bench.options import TASKS
from .commands import cmd_bench, cmd_doctor, cmd_index, cmd_inspect, cmd_preprocess, cmd_synth

LABEL_NAMES_HELP = ("take every label as a class name as written: booleans (false, true), numbers (1.5), "
                    "sparse integer ids (5000000); classes sorted as text (docs/formats.md, Labels)")


def feeds_epilog() -> str:
    """`bench --help`'s list of the feeds `--feeds` names, each with what it is."""
    from .bench.feeds import CATALOGUE, FEEDS

    width = max(len(name) for name in CATALOGUE) + 4
    lines = ["feeds (--feeds NAME,NAME...; each reads the same images with the same crop, flip and batch size; the "
             "*-coco-* feeds run with --task detection):"]
    for name in CATALOGUE:
        lines += textwrap.wrap(FEEDS.caps(name).about, 100, initial_indent=f"  {name:<{width - 2}}",
                               subsequent_indent=" " * width, break_on_hyphens=False)
    return "\n".join(lines)


def _positive_int(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1, got {value}")
    return value


def _add_image_key(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--image-key", default=None,
                        help="WebDataset: the image member's extension, or several by preference (jpg,png): the "
                             "first present is the image (default: the one image member; a sample with several, "
                             "such as a mask beside a photo, is rejected naming them)")


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of every subcommand."""
    parser = argparse.ArgumentParser(prog="iofeed", description="Keep GPUs busy during image training.")
    sub = parser.add_subparsers(dest="command", required=True)

    synth = sub.add_parser("synth", help="make a Caltech-256- or COCO-shaped stand-in dataset")
    synth.add_argument("kind", choices=["caltech256", "coco"], help="which stand-in: caltech256 (257 classes, the "
                       "real per-class counts, 30,607 images, ~1.1 GiB); coco (objects with boxes and masks, "
                       "COCO's instances JSON, a few malformed annotations)")
    synth.add_argument("out", type=Path, help="folder to write (caltech256: OUT/256_ObjectCategories/<class>/*.jpg; "
                       "coco: OUT/train2017/*.jpg and OUT/annotations/instances_train2017.json)")
    synth.add_argument("--images", type=_positive_int, default=64, help="coco: images to make (default 64)")
    synth.add_argument("--per-class", type=_positive_int, default=None,
                       help="images per class (default: the real counts)")
    synth.add_argument("--seed", type=int, default=0, help="seed of the pictures, sizes and quirks (default 0)")
    synth.add_argument("--workers", type=_positive_int, default=None, help="processes (default: the usable cores)")
    synth.add_argument("--overwrite", action="store_true", help="replace an existing stand-in")
    synth.set_defaults(func=cmd_synth)

    from ..prepare.executors import ENGINES

    prep = sub.add_parser("preprocess", help="validate, convert, resize, split and pack a folder once")
    from ..prepare.sources.kinds import SOURCES

    prep.add_argument("src", help="a folder with one subfolder per class (Caltech-256 layout accepted); WebDataset "
                                  "tar shards (a path, glob, brace list or s3/gs/http(s) URL); Parquet files; a "
                                  "Hugging Face dataset saved with save_to_disk; or, with --labels, a folder of images")
    prep.add_argument("--source", choices=["auto", *SOURCES.names()], default="auto",
                      help="what SRC is (default auto: recognised by content)")
    prep.add_argument("--labels", type=Path, default=None,
                      help="CSV or JSON-lines file mapping paths under SRC to a class, several classes or any JSON "
                           "value (also plain `PATH LABEL` lines, as ImageNet's validation labels)")
    prep.add_argument("--label-column", default=None,
                      help="the label's column (labels file, Parquet), JSON key or WebDataset member (default label, "
                           "or cls/txt/json for WebDataset)")
    prep.add_argument("--label-names", action="store_true", help=LABEL_NAMES_HELP)
    prep.add_argument("--target", choices=["class", "text"], default="class",
                      help="what each sample's target is: its class (default), or text: its caption, kept exactly "
                           "as written (image-text WebDataset shards as img2dataset writes them: the txt member, "
                           "else json 'caption', or the member / json key --label-column names); read with "
                           "iofeed.Output(target='text')")
    prep.add_argument("--image-column", default=None,
                      help="Parquet / Hugging Face: the image column (default: the first binary or {bytes, path} one)")
    _add_image_key(prep)
    prep.add_argument("--box-format", default=None,
                      help="WebDataset boxes under a key that does not say (bboxes): xyxy, xywh, cxcywh (pixels), "
                           "yolo or albumentations (normalised)")
    prep.add_argument("-o", "--out", default=None,
                      help="output dataset: a folder (default: SRC.iof beside SRC), or an s3:// or gs:// URL "
                           "to upload to (prepared in a temporary folder, iofeed.json uploaded last)")
    prep.add_argument("--size", type=int, default=None,
                      help="shorter side in pixels, never upscaled (default 256; COCO detection sources 800)")
    prep.add_argument("--quality", type=int, default=90, help="JPEG quality (default 90)")
    prep.add_argument("--format", choices=["jpeg", "raw", "mixed"], default="jpeg",
                      help="jpeg (default); raw: uint8 RGB pixels, decode-free, ~10x the disk of JPEG; "
                           "mixed: raw up to --raw-max-pixels, JPEG above")
    prep.add_argument("--raw-max-pixels", type=int, default=256 * 320,
                      help="with --format mixed: largest stored image (width x height) kept raw (default 81920)")
    prep.add_argument("--seed", type=int, default=0, help="seed of the train/val split and shard order")
    split = prep.add_mutually_exclusive_group()
    split.add_argument("--val-per-class", type=int, default=None, help="validation images per class")
    split.add_argument("--val-fraction", type=float, default=None,
                       help="validation share of each class (default 0.1; 0: all train, 1: all val)")
    prep.add_argument("--shard-mb", type=float, default=128.0, help="maximum shard size in MiB (default 128)")
    prep.add_argument("--workers", type=_positive_int, default=None, help="processes (default: the usable cores)")
    prep.add_argument("--overwrite", action="store_true", help="replace an existing output")
    prep.add_argument("--strict", action="store_true", help="fail if any input is rejected")
    prep.add_argument("--engine", choices=ENGINES.names(), default="local",
                      help="local: process pool on this machine (default); ray: Ray Data tasks on a Ray cluster")
    prep.add_argument("--address", default=None,
                      help="Ray cluster to use with --engine ray (default: RAY_ADDRESS, else a local one of --workers "
                            "CPUs)")
    prep.set_defaults(func=cmd_preprocess)

    index = sub.add_parser("index", help="index existing WebDataset shards in place (no rewrite) for the loader")
    index.add_argument("shards", help="tar shards: a path, folder, glob, brace list (shards-{000000..000127}.tar) "
                                      "or s3/gs/http(s) URLs")
    index.add_argument("-o", "--out", required=True, help="the dataset folder to write (manifest, table, .idx files)")
    index.add_argument("--split", default="train", help="the split's name (default train)")
    index.add_argument("--label-column", default=None,
                       help="the label's member or json key (default: cls, txt, or json 'label')")
    _add_image_key(index)
    index.add_argument("--label-names", action="store_true", help=LABEL_NAMES_HELP)
    index.add_argument("--overwrite", action="store_true", help="replace an existing output")
    index.set_defaults(func=cmd_index)

    inspect = sub.add_parser("inspect", help="print the summary of an iofeed dataset")
    inspect.add_argument("dataset", nargs="?", help="an iofeed dataset folder, or its s3://, gs:// or http(s):// URL")
    inspect.add_argument("--verify", action="store_true",
                         help="also check every shard's size and sha256, index and sample table against the "
                              "manifest, and decode every JPEG sample (local datasets only)")
    inspect.add_argument("--mix", action="append", metavar="SOURCE=WEIGHT",
                         help="instead of a dataset: a mixture's sources with their weights (repeat it), and what "
                              "an epoch takes from each (see iofeed.Mix)")
    inspect.add_argument("--epoch-samples", type=int, default=None, help="with --mix: samples per epoch")
    inspect.add_argument("--classes", choices=("name", "offset"), default="name", help="with --mix: class rule")
    inspect.add_argument("--split", default="train", help="with --mix: the split (default train)")
    inspect.set_defaults(func=cmd_inspect)

    bench = sub.add_parser("bench", help="measure loaders side by side: images/sec, CPU, memory (and GPU)",
                           formatter_class=argparse.RawDescriptionHelpFormatter, epilog=feeds_epilog())
    bench.add_argument("source", type=Path, nargs="?", default=None,
                       help="image folder or iofeed dataset (default: the Caltech-256 stand-in in data/c256, made if "
                             "missing)")
    bench.add_argument("--task", default="classification", choices=TASKS,
                       help="classification (default): the image-and-label feeds; detection: torchvision's "
                            "CocoDetection against iofeed with boxes, and with boxes and instance masks, on a COCO "
                            "folder or its dataset (default: the stand-in in data/coco-standin, made if missing)")
    bench.add_argument("--model", default=None,
                       help="resnet50, resnet18 or none (default: resnet50 on the GPU, none on the CPU)")
    bench.add_argument("--device", default=None, help="cpu or cuda (default: cuda when PyTorch sees a GPU)")
    bench.add_argument("--batch-size", type=int, default=64,
                       help="images per batch, the same for every feed (default 64)")
    bench.add_argument("--image-size", type=int, default=224, help="output side in pixels (default 224)")
    bench.add_argument("--feeds", default=None,
                       help="comma-separated feed names (listed below; default: every PyTorch feed that can run; "
                            "iofeed-jax, iofeed-tf, iofeed-tf-epochs and grain only when named, on the CPU)")
    bench.add_argument("--seconds", type=float, default=10.0,
                       help="timed seconds per feed, split over the rounds (default 10)")
    bench.add_argument("--rounds", type=int, default=3, help="windows per feed, feeds alternating (default 3)")
    bench.add_argument("--warmup", type=float, default=2.0,
                       help="untimed seconds per feed before its first window (default 2)")
    bench.add_argument("--workers", type=int, default=None,
                       help="worker processes/threads per feed (default: the usable cores)")
    bench.add_argument("--seed", type=int, default=0,
                       help="seed of every feed's sample order, crops and flips (default 0)")
    bench.add_argument("--json", type=Path, default=None,
                       help="results file (default: SOURCE.bench/bench-<date>.json beside the data)")
    bench.add_argument("--plot", type=Path, default=None, help="PNG plot (default: beside the JSON)")
    bench.add_argument("--no-warm-cache", action="store_true", help="do not read the data once before measuring")
    bench.add_argument("--stall-seconds", type=float, default=300.0,
                       help="seconds a feed may take beyond what it was asked before it counts as hung: it is "
                            "killed and marked failed, the other feeds go on (default 300)")
    bench.set_defaults(func=cmd_bench)

    doctor = sub.add_parser("doctor", usage="iofeed doctor [SOURCE] [options] [-- COMMAND ...]",
                            help="check the machine and data, and trace a training command for feeding problems",
                            epilog="-- COMMAND ...  the training command to run and trace, after `--` (e.g. iofeed "
                                   "doctor data/c256 -- python train.py); doctor then exits with its status")
    doctor.add_argument("source", type=Path, nargs="?", default=None, help="image folder or iofeed dataset to check")
    doctor.add_argument("--json", type=Path, default=None, help="write the findings and the trace as JSON")
    doctor.add_argument("--plot", type=Path, default=None, help="utilisation timeline PNG (default: beside --json)")
    doctor.add_argument("--interval", type=float, default=0.1, help="seconds between samples (default 0.1)")
    doctor.set_defaults(func=cmd_doctor, child=None)
    return parser
