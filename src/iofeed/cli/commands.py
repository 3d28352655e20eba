"""The `iofeed` subcommands run from their parsed arguments (each imports its work lazily,
so that `iofeed --help` stays fast)."""
from __future__ import annotations

import argparse
import functools
import math
import sys
from pathlib import Path

from ..errors import DatasetError, OptionError
from ..format.manifest import Manifest
from .printing import plural, print_manifest, print_preprocess_summary, verified_line


def _shard_bytes(mib: float) -> int:
    """`--shard-mb` in bytes; OptionError for NaN, infinite or non-positive sizes."""
    if not math.isfinite(mib) or mib <= 0:
        raise OptionError(f"--shard-mb must be a positive number of MiB, got {mib}")
    return int(mib * 2**20)


def cmd_synth(args: argparse.Namespace) -> None:
    if args.kind == "coco":
        from ..prepare.synth_coco import synth_coco

        coco = synth_coco(args.out, images=args.images, seed=args.seed, overwrite=args.overwrite)
        print(f"wrote {coco.images} images, {coco.annotations} annotations and {coco.malformed} malformed ones to "
              f"{coco.root} ({coco.seconds:.1f} s)")
        return
    from ..prepare.synth import synth_caltech256

    summary = synth_caltech256(
        args.out, per_class=args.per_class, seed=args.seed, workers=args.workers, overwrite=args.overwrite
    )
    print(
        f"wrote {summary.images} images in {summary.classes} classes to {summary.root} "
        f"({summary.bytes / 2**20:.1f} MiB, {summary.seconds:.1f} s)"
    )


def cmd_preprocess(args: argparse.Namespace) -> None:
    from ..format.policy import ImagePolicy
    from ..prepare.output import terminate_as_interrupt
    from ..prepare.run import preprocess
    from ..prepare.upload import preprocess_to_url
    from ..sources.remote.urls import is_url

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
            target=args.target,
            box_format=args.box_format,
        )
    print_preprocess_summary(summary)


def cmd_index(args: argparse.Namespace) -> None:
    from ..prepare.index import index_shards
    from ..prepare.output import terminate_as_interrupt

    with terminate_as_interrupt():
        summary = index_shards(args.shards, Path(args.out), split=args.split, label_column=args.label_column,
                               image_key=args.image_key, overwrite=args.overwrite, label_names=args.label_names)
    rejected = sum(summary.rejected.values())
    print(f"iofeed index written to {summary.out}: {plural(summary.samples, 'sample')} in "
          f"{plural(summary.shards, 'shard')} (read in place), {rejected:,} rejected"
          + (f" (see {summary.out}/rejected.jsonl)" if rejected else ""))
    for reason, count in sorted(summary.rejected.items(), key=lambda kv: -kv[1]):
        print(f"    {count:>6,}  {reason}")
    if summary.one_sample_classes:
        print(f"  classes       {summary.one_sample_classes}")


def cmd_inspect(args: argparse.Namespace) -> None:
    from ..sources.remote.dataset import read_manifest
    from ..sources.remote.urls import is_url

    if args.mix or args.dataset is None or (args.epoch_samples, args.classes, args.split) != (None, "name", "train"):
        from .mix_inspect import inspect_mixture  # the options only a mixture takes: refused there without --mix

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
        from ..prepare.verify import verify_dataset

        checked = verify_dataset(dataset, progress=True)
        for problem in checked.problems:
            print(f"  problem       {problem}")
        if checked.problems:
            raise DatasetError(f"{dataset} failed verification: {len(checked.problems)} problem(s), first: "
                               f"{checked.problems[0]} (run `iofeed preprocess` again)")
        print(f"  verified      {verified_line(checked)}")


def cmd_bench(args: argparse.Namespace) -> int:
    from .bench.options import BenchOptions, parse_feeds, require_bench

    require_bench()  # before importing what needs it
    from .bench.report import all_failed, table
    from .bench.run import run_benchmark

    options = BenchOptions(
        source=args.source, model=args.model, device=args.device, batch_size=args.batch_size,
        image_size=args.image_size,
        feeds=parse_feeds(args.feeds), seconds=args.seconds, rounds=args.rounds, warmup=args.warmup,
        workers=args.workers, seed=args.seed, warm_cache=not args.no_warm_cache, stall_seconds=args.stall_seconds,
        json_path=args.json, plot_path=args.plot, task=args.task,
    )
    flags = {"--model": args.model, "--device": args.device, "--batch-size": args.batch_size,
             "--image-size": args.image_size,
             "--feeds": args.feeds, "--seconds": args.seconds, "--rounds": args.rounds, "--warmup": args.warmup,
             "--workers": args.workers, "--seed": args.seed, "--json": args.json, "--plot": args.plot}
    if args.task != "classification":
        flags = {"--task": args.task, **flags}
    command = " ".join(["iofeed bench", *([str(args.source)] if args.source else []),
                        *(f"{flag} {value}" for flag, value in flags.items() if value is not None),
                        *(["--no-warm-cache"] if args.no_warm_cache else [])])
    record, json_path, png_path = run_benchmark(options, command)
    print(table(record))
    print(f"page cache: {record['page_cache']['state']}; results: {json_path} and {png_path}")
    if not record["complete"]:
        raise KeyboardInterrupt  # the table of what was measured is printed; the exit status says interrupted
    failed = all_failed(record)
    if failed:
        print(f"iofeed: error: {failed}", file=sys.stderr)
        return 1
    return 0


def cmd_doctor(args: argparse.Namespace) -> int:
    from .doctor.report import render
    from .doctor.run import run_doctor

    checkup = run_doctor(args.source, args.child, args.interval, args.json, args.plot)
    print(render(checkup))
    return checkup.exit_status()
