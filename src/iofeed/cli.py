"""The `iofeed` command line."""
from __future__ import annotations

import argparse
import functools
import math
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from .errors import DatasetError, IofeedError, OptionError
from .format.manifest import IMAGES_AS_IS, Manifest

if TYPE_CHECKING:
    from .format.verify import Verification
    from .prepare.run import PreprocessSummary

LABEL_NAMES_HELP = ("take every label as a class name as written: booleans (false, true), numbers (1.5), "
                    "sparse integer ids (5000000); classes sorted as text (docs/formats.md, Labels)")


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


def _shard_bytes(mib: float) -> int:
    """`--shard-mb` in bytes; OptionError for NaN, infinite or non-positive sizes."""
    if not math.isfinite(mib) or mib <= 0:
        raise OptionError(f"--shard-mb must be a positive number of MiB, got {mib}")
    return int(mib * 2**20)


def _count(n: int, noun: str) -> str:
    """"1 shard", "2 shards"."""
    return f"{n:,} {noun}{'' if n == 1 else 's'}"


def _mib(n: float) -> str:
    return f"{n / 2**20:,.1f} MiB"


def print_preprocess_summary(summary: PreprocessSummary) -> None:
    """What preprocess read, wrote and rejected, and how fast."""
    written = ", ".join(f"{name} {count:,}" for name, count in summary.written.items())
    print(f"iofeed dataset written to {summary.out}")
    print(f"  images found  {summary.found:,}")
    print(f"  written       {written}")
    rejected = sum(summary.rejected.values())
    print(f"  rejected      {rejected:,}" + (f" (see {summary.out}/rejected.jsonl)" if rejected else ""))
    for reason, count in sorted(summary.rejected.items(), key=lambda kv: -kv[1]):
        print(f"    {count:>6,}  {reason}")
    if summary.empty_classes:
        names = ", ".join(summary.empty_classes[:5]) + (", ..." if len(summary.empty_classes) > 5 else "")
        print(f"  empty classes {len(summary.empty_classes):,} class folders without an image, "
              f"kept as labels with 0 samples: {names}")
    if summary.several_classes:
        print(f"  multi-label   {_count(summary.several_classes, 'sample')} with several classes (e.g. "
              f"{summary.several_example}): the targets are multi_label; load them with target=\"multi_hot\"")
    if summary.duplicates.line():
        print(f"  duplicates    {summary.duplicates.line()}")
    for path in summary.stale_removed:
        print(f"  removed       {path} (left by an interrupted run)")
    print(f"  bytes         {_mib(summary.bytes_in)} in, {_mib(summary.bytes_out)} out")
    print(f"  time          {summary.seconds:.1f} s ({summary.images_per_sec:,.0f} images/sec)")


def print_manifest(path: Path | str, manifest: Manifest) -> None:
    """The manifest of the dataset at `path`, as a short report."""
    src = manifest.source
    print(f"{path}  ({manifest.format} v{manifest.version}, {manifest.created_by})")
    print(f"  classes       {len(manifest.classes)} ({', '.join(manifest.classes[:3])}, ...)")
    for name, info in manifest.splits.items():
        size = sum(s["bytes"] for s in info.shards)
        print(f"  {name:<13} {info.samples:,} samples in {_count(len(info.shards), 'shard')}, {_mib(size)}")
    image = manifest.image
    if image["encoding"] == IMAGES_AS_IS:
        print("  images        as they are in the shards, indexed in place (`iofeed inspect --verify` decodes them)")
    else:
        quality = "" if image["encoding"] == "raw" else f", quality {image['quality']}"  # raw pixels have none
        print(f"  images        {image['encoding']}, shorter side {image['shorter_side']}{quality}")
    if manifest.targets["kind"] != "class" or manifest.targets["extras"]:
        print(f"  targets       {manifest.targets['kind']}" + (", with extras" if manifest.targets["extras"] else ""))
    stored = src.get("stored")
    if stored and stored["samples"]["raw"]:
        on_disk = stored["bytes"]["jpeg"] + stored["bytes"]["raw"]
        print(f"  stored        {stored['samples']['raw']:,} raw, {stored['samples']['jpeg']:,} JPEG: "
              f"{_mib(on_disk)} on disk against ~{_mib(stored['as_jpeg_bytes_estimate'])} as JPEG "
              f"({on_disk / max(stored['as_jpeg_bytes_estimate'], 1):.1f}x); the page cache should hold it")
    print(f"  source        {src['path']}: {src['found']:,} found, {src['accepted']:,} accepted, "
          f"{src['rejected']:,} rejected")
    for reason, count in src["rejected_by_reason"].items():
        print(f"    {count:>6,}  {reason}")
    if image["encoding"] == IMAGES_AS_IS:
        return
    mean_w, mean_h = src["mean_size"]
    print(f"  source images mean {mean_w:.0f}x{mean_h:.0f}, modes {src['modes']}, {_mib(src['bytes_in'])}")


def _cmd_synth(args: argparse.Namespace) -> None:
    from .prepare.synth import synth_caltech256

    summary = synth_caltech256(
        args.out, per_class=args.per_class, seed=args.seed, workers=args.workers, overwrite=args.overwrite
    )
    print(
        f"wrote {summary.images} images in {summary.classes} classes to {summary.root} "
        f"({summary.bytes / 2**20:.1f} MiB, {summary.seconds:.1f} s)"
    )


def _cmd_preprocess(args: argparse.Namespace) -> None:
    from .prepare.output import terminate_as_interrupt
    from .prepare.run import ImagePolicy, preprocess
    from .remote.upload import preprocess_to_url
    from .remote.urls import is_url

    if is_url(args.out):  # prepared in a temporary folder, then uploaded
        run = functools.partial(preprocess_to_url, args.src, args.out)
    else:
        run = functools.partial(preprocess, args.src, None if args.out is None else Path(args.out))
    with terminate_as_interrupt():
        summary = run(
            policy=ImagePolicy(shorter_side=args.size, quality=args.quality, format=args.format,
                               raw_max_pixels=args.raw_max_pixels),
            seed=args.seed,
            val_per_class=args.val_per_class,
            val_fraction=args.val_fraction,
            shard_bytes=_shard_bytes(args.shard_mb),
            workers=args.workers,
            overwrite=args.overwrite,
            strict=args.strict,
            engine=args.engine,
            address=args.address,
            source=args.source,
            labels=args.labels,
            label_column=args.label_column,
            image_column=args.image_column,
            label_names=args.label_names,
            image_key=args.image_key,
        )
    print_preprocess_summary(summary)


def _cmd_index(args: argparse.Namespace) -> None:
    from .prepare.index import index_shards
    from .prepare.output import terminate_as_interrupt

    with terminate_as_interrupt():
        summary = index_shards(args.shards, Path(args.out), split=args.split, label_column=args.label_column,
                               image_key=args.image_key, overwrite=args.overwrite, label_names=args.label_names)
    rejected = sum(summary.rejected.values())
    print(f"iofeed index written to {summary.out}: {_count(summary.samples, 'sample')} in "
          f"{_count(summary.shards, 'shard')} (read in place), {rejected:,} rejected"
          + (f" (see {summary.out}/rejected.jsonl)" if rejected else ""))
    for reason, count in sorted(summary.rejected.items(), key=lambda kv: -kv[1]):
        print(f"    {count:>6,}  {reason}")


def _cmd_inspect(args: argparse.Namespace) -> None:
    from .remote.dataset import read_manifest
    from .remote.urls import is_url

    if args.mix or args.dataset is None or (args.epoch_samples, args.classes, args.split) != (None, "name", "train"):
        from .mixinspect import inspect_mixture  # the options only a mixture takes: refused there without --mix

        inspect_mixture(args)
        return

    if is_url(args.dataset):
        if args.verify:
            raise OptionError(f"--verify reads every shard, so it checks local datasets only: verify the folder "
                              f"before uploading it to {args.dataset} (a streamed shard is checked against its "
                              "size and sha256 whenever it is fetched)")
        print_manifest(args.dataset, read_manifest(args.dataset))
        return
    dataset = Path(args.dataset)
    try:
        print_manifest(dataset, Manifest.read(dataset))
    except (KeyError, TypeError, ValueError, AttributeError) as exc:  # its summary fields, hand-edited
        raise DatasetError(f"malformed manifest {dataset / 'iofeed.json'}: {type(exc).__name__} {exc} in its "
                           "summary fields (run `iofeed preprocess` again)") from None
    if args.verify:
        from .format.verify import verify_dataset

        checked = verify_dataset(dataset, progress=True)
        for problem in checked.problems:
            print(f"  problem       {problem}")
        if checked.problems:
            raise DatasetError(f"{dataset} failed verification: {len(checked.problems)} problem(s), first: "
                               f"{checked.problems[0]} (run `iofeed preprocess` again)")
        print(f"  verified      {_verified_line(checked)}")


def _verified_line(checked: Verification) -> str:
    """What a verification without problems checked, exactly: what it read, hashed, decoded and
    compared, and what it could not (shards at URLs are never fetched)."""
    local, unhashed = checked.shards - checked.streamed, checked.shards - checked.streamed - checked.hashed
    parts = ([] if not local else
             ["shard sizes and sha256 match the manifest" if not unhashed else
              f"shard sizes match; {_count(unhashed, 'shard')} without a sha256 (written before checksums) not hashed",
              "tables, indexes and labels agree"])
    parts += [f"{checked.relabelled:,} labels read again from the shards"] if checked.relabelled else []
    parts += [f"{checked.targets:,} targets-file rows match their shards"] if checked.targets else []
    raw = checked.samples - checked.decoded - checked.unread
    parts += [f"all {checked.decoded:,} JPEG samples decode"] if checked.decoded else []
    parts += [f"{raw:,} raw samples have their sizes"] if raw > 0 else []
    if checked.streamed:
        parts.append(f"{_count(checked.streamed, 'shard')} at URLs ({checked.unread:,} samples) not read: only "
                     "their index and table rows checked (the node cache checks each one's size and sha256 "
                     "when it fetches it; verify a local copy to decode them)")
    return f"{checked.samples:,} samples in {_count(checked.shards, 'shard')}: " + "; ".join(parts)


def _cmd_bench(args: argparse.Namespace) -> None:
    from .benchmark.options import BenchOptions, parse_feeds, require_bench

    require_bench()  # before importing what needs it
    from .benchmark.report import table
    from .benchmark.run import run_benchmark

    options = BenchOptions(
        source=args.source, model=args.model, device=args.device, batch_size=args.batch_size,
        image_size=args.image_size,
        feeds=parse_feeds(args.feeds), seconds=args.seconds, rounds=args.rounds, warmup=args.warmup,
        workers=args.workers, seed=args.seed, warm_cache=not args.no_warm_cache, stall_seconds=args.stall_seconds,
        json_path=args.json, plot_path=args.plot,
    )
    flags = {"--model": args.model, "--device": args.device, "--batch-size": args.batch_size,
             "--image-size": args.image_size,
             "--feeds": args.feeds, "--seconds": args.seconds, "--rounds": args.rounds, "--warmup": args.warmup,
             "--workers": args.workers, "--seed": args.seed, "--json": args.json, "--plot": args.plot}
    command = " ".join(["iofeed bench", *([str(args.source)] if args.source else []),
                        *(f"{flag} {value}" for flag, value in flags.items() if value is not None),
                        *(["--no-warm-cache"] if args.no_warm_cache else [])])
    record, json_path, png_path = run_benchmark(options, command)
    print(table(record))
    print(f"page cache: {record['page_cache']['state']}; results: {json_path} and {png_path}")
    if not record["complete"]:
        raise KeyboardInterrupt  # the table of what was measured is printed; the exit status says interrupted


def _cmd_doctor(args: argparse.Namespace) -> int:
    from .doctor.report import render
    from .doctor.run import run_doctor

    checkup = run_doctor(args.source, args.child, args.interval, args.json, args.plot)
    print(render(checkup))
    return checkup.exit_status()


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of every subcommand."""
    parser = argparse.ArgumentParser(prog="iofeed", description="Keep GPUs fed during image training.")
    sub = parser.add_subparsers(dest="command", required=True)

    synth = sub.add_parser("synth", help="make a Caltech-256-shaped stand-in dataset")
    synth.add_argument("kind", choices=["caltech256"], help="which stand-in: caltech256 (257 classes, the real "
                       "per-class counts, 30,607 images, ~1.1 GiB)")
    synth.add_argument("out", type=Path, help="folder to write (OUT/256_ObjectCategories/<class>/*.jpg)")
    synth.add_argument("--per-class", type=_positive_int, default=None,
                       help="images per class (default: the real counts)")
    synth.add_argument("--seed", type=int, default=0, help="seed of the pictures, sizes and quirks (default 0)")
    synth.add_argument("--workers", type=_positive_int, default=None, help="processes (default: the usable cores)")
    synth.add_argument("--overwrite", action="store_true", help="replace an existing stand-in")
    synth.set_defaults(func=_cmd_synth)

    from .prepare.engines import ENGINES

    prep = sub.add_parser("preprocess", help="validate, convert, resize, split and pack a folder once")
    from .prepare.sources.registry import SOURCES

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
    prep.add_argument("--image-column", default=None,
                      help="Parquet / Hugging Face: the image column (default: the first binary or {bytes, path} one)")
    _add_image_key(prep)
    prep.add_argument("-o", "--out", default=None,
                      help="output dataset: a folder (default: SRC.iof beside SRC), or an s3:// or gs:// URL "
                           "to upload to (prepared in a temporary folder, iofeed.json uploaded last)")
    prep.add_argument("--size", type=int, default=256, help="shorter side in pixels, never upscaled (default 256)")
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
    prep.set_defaults(func=_cmd_preprocess)

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
    index.set_defaults(func=_cmd_index)

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
    inspect.set_defaults(func=_cmd_inspect)

    from .benchmark.feeds import CATALOGUE

    bench = sub.add_parser("bench", help="measure loaders side by side: images/sec, CPU, memory (and GPU)")
    bench.add_argument("source", type=Path, nargs="?", default=None,
                       help="image folder or iofeed dataset (default: the Caltech-256 stand-in in data/c256, made if "
                             "missing)")
    bench.add_argument("--model", default=None,
                       help="resnet50, resnet18 or none (default: resnet50 on the GPU, none on the CPU)")
    bench.add_argument("--device", default=None, help="cpu or cuda (default: cuda when PyTorch sees a GPU)")
    bench.add_argument("--batch-size", type=int, default=64)
    bench.add_argument("--image-size", type=int, default=224, help="output side in pixels (default 224)")
    bench.add_argument("--feeds", default=None,
                       help=f"comma-separated, from: {', '.join(CATALOGUE)} (default: every PyTorch feed that can run;"
                       " iofeed-jax, iofeed-tf, iofeed-tf-epochs and grain only when named, on the CPU)")
    bench.add_argument("--seconds", type=float, default=10.0,
                       help="timed seconds per feed, split over the rounds (default 10)")
    bench.add_argument("--rounds", type=int, default=3, help="windows per feed, feeds alternating (default 3)")
    bench.add_argument("--warmup", type=float, default=2.0,
                       help="untimed seconds per feed before its first window (default 2)")
    bench.add_argument("--workers", type=int, default=None,
                       help="worker processes/threads per feed (default: the usable cores)")
    bench.add_argument("--seed", type=int, default=0)
    bench.add_argument("--json", type=Path, default=None,
                       help="results file (default: SOURCE.bench/bench-<date>.json beside the data)")
    bench.add_argument("--plot", type=Path, default=None, help="PNG plot (default: beside the JSON)")
    bench.add_argument("--no-warm-cache", action="store_true", help="do not read the data once before measuring")
    bench.add_argument("--stall-seconds", type=float, default=300.0,
                       help="seconds a feed may take beyond what it was asked before it counts as hung: it is "
                            "killed and marked failed, the other feeds go on (default 300)")
    bench.set_defaults(func=_cmd_bench)

    doctor = sub.add_parser("doctor", usage="iofeed doctor [SOURCE] [options] [-- COMMAND ...]",
                            help="check the machine and data, and trace a training command for feeding problems",
                            epilog="-- COMMAND ...  the training command to run and trace, after `--` (e.g. iofeed "
                                   "doctor data/c256 -- python train.py); doctor then exits with its status")
    doctor.add_argument("source", type=Path, nargs="?", default=None, help="image folder or iofeed dataset to check")
    doctor.add_argument("--json", type=Path, default=None, help="write the findings and the trace as JSON")
    doctor.add_argument("--plot", type=Path, default=None, help="utilisation timeline PNG (default: beside --json)")
    doctor.add_argument("--interval", type=float, default=0.1, help="seconds between samples (default 0.1)")
    doctor.set_defaults(func=_cmd_doctor, child=None)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Run the command line; bad input prints one line and returns a non-zero status."""
    argv = list(sys.argv[1:] if argv is None else argv)
    child = None
    if argv[:1] == ["doctor"] and "--" in argv:  # `iofeed doctor ... -- COMMAND ...`: the command to trace
        argv, child = argv[:argv.index("--")], argv[argv.index("--") + 1:]
    parser = build_parser()
    args, extra = parser.parse_known_args(argv)
    if extra and args.command == "doctor" and not extra[0].startswith("-"):  # `doctor SRC python x.py`: no `--`
        print(f"iofeed doctor: error: unrecognized arguments: {' '.join(extra)}: put the command to trace after "
              f"`--`: iofeed doctor {' '.join(a for a in argv[1:] if a not in extra)} -- {' '.join(extra)}",
              file=sys.stderr)
        return 2
    if extra:
        parser.error(f"unrecognized arguments: {' '.join(extra)}")
    if child is not None:
        args.child = child
    try:
        status = args.func(args)
    except IofeedError as exc:
        print(f"iofeed: error: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("iofeed: interrupted", file=sys.stderr)
        return 130
    except OSError as exc:  # one the command did not expect: still one line, with the file
        where = f": {exc.filename}" if exc.filename else ""
        print(f"iofeed: error: {exc.strerror or str(exc) or type(exc).__name__}{where}", file=sys.stderr)
        return 1
    return status or 0  # a command's own status (doctor: the traced command's)


if __name__ == "__main__":
    sys.exit(main())
