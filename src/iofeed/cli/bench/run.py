"""`iofeed bench` from options to results: inputs, feed plan, page cache, measurement, record, files."""
from __future__ import annotations

from dataclasses import asdict, replace
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from ...errors import IofeedError, OptionError, require
from ...runtime.system import usable_cores
from ...sources.folder_scan import find_class_root
from .feeds import BASELINE, CATALOGUE, CEILING, DETECTION_BASELINE, FEEDS, FeedSpec, default_feeds, unmet
from .inputs import CacheState, Inputs, data_files, resolve_inputs, warm_page_cache
from .measure import FeedRun, measure, memory_metric
from .options import BenchOptions, check_writable
from .sources import SOURCES


def pick_device(asked: str | None) -> str:
    """`asked` ("cpu" or "cuda"; a GPU must be there for "cuda"), else "cuda" when PyTorch sees a GPU."""
    torch = require("torch", "bench")
    if asked == "cuda" and not torch.cuda.is_available():
        raise OptionError("--device cuda, but PyTorch sees no CUDA GPU (use --device cpu)")
    return asked or ("cuda" if torch.cuda.is_available() else "cpu")


def _classes(inputs: Inputs) -> int:
    """Number of classes, for the model's last layer."""
    if inputs.dataset is not None:
        from ...format.manifest import Manifest

        return len(Manifest.read(inputs.dataset).classes)
    if inputs.folder is not None:
        return sum(1 for d in find_class_root(inputs.folder).iterdir() if d.is_dir() and not d.name.startswith("."))
    return 1000


def check_task(options: BenchOptions) -> None:
    """OptionError (one line) when `--feeds` names a feed of another task than `--task`."""
    for name in options.feeds or ():
        task = FEEDS.caps(name).task
        if task != options.task:
            raise OptionError(f"feed {name!r} is a {task} feed and this is a {options.task} run: pass --task {task} "
                              f"(a run measures the feeds of one task)")


def plan_feeds(names: tuple[str, ...], inputs: Inputs, options: BenchOptions, device: str,
               model: str) -> tuple[list[FeedSpec], list[FeedRun]]:
    """Specs of the feeds to measure, and runs already marked skipped (with the reason)."""
    workers = options.workers or usable_cores().amount
    classes = _classes(inputs) if model != "none" else 1000
    specs, skipped = [], []
    for name in names + ((CEILING,) if model != "none" else ()):
        entry = FEEDS.caps(name)
        source = inputs.path(entry.reads)
        spec = FeedSpec(name, str(source or ""), entry.workers or workers, options.batch_size,
                        options.image_size, device, options.seed, model, classes)
        lacking = unmet(entry, device)
        if lacking is not None:
            skipped.append(FeedRun(spec, "skipped", lacking))
        elif entry.reads and source is None:
            skipped.append(FeedRun(spec, "skipped", inputs.missing.get(entry.reads, f"no {entry.reads} to read")))
        else:
            specs.append(spec)
    return specs, skipped


def run_benchmark(options: BenchOptions, command: str) -> tuple[dict[str, Any], Path, Path]:
    """Measure, write the JSON (after every window, atomically) and the PNG; return (record, JSON
    path, PNG path). After Ctrl-C the record holds the windows measured so far, `"complete": false`."""
    options.check(tuple(CATALOGUE))
    check_task(options)
    now = datetime.now(timezone.utc)
    json_path, png_path = options.outputs(now)
    check_writable(json_path, png_path)  # before any work: the JSON is written after every window
    print(f"iofeed bench: results will go to {json_path} and {png_path}")
    names = options.feeds or default_feeds(options.task)
    device = pick_device(options.device)
    model = options.model or ("resnet50" if device == "cuda" and options.task == "classification" else "none")
    needed = {FEEDS.caps(n).reads for n in names if unmet(FEEDS.caps(n), device) is None}  # none for a skipped feed
    if options.task == "detection":
        from .detection_inputs import WHAT_EACH_DOES, resolve_coco

        inputs = resolve_coco(options.source, needed, options.progress)
        inputs.notes.append(WHAT_EACH_DOES)
    else:
        inputs = resolve_inputs(options.source, needed, options.progress)
    specs, skipped = plan_feeds(names, inputs, options, device, model)
    specs, skipped, endpoint = _serve_streamed(specs, skipped, json_path.parent)
    try:
        return _measure_and_write(options, command, now, (json_path, png_path), names, device, model, inputs,
                                  specs, skipped)
    finally:  # even on an error or Ctrl-C: the local S3 server stops and the feeds' cache folder goes
        if endpoint is not None:
            endpoint.close()


def _measure_and_write(options: BenchOptions, command: str, now: datetime, paths: tuple[Path, Path],
                       names: tuple[str, ...], device: str, model: str, inputs: Inputs, specs: list[FeedSpec],
                       skipped: list[FeedRun]) -> tuple[dict[str, Any], Path, Path]:
    """The measurement and its files, once the feeds are planned (see `run_benchmark`)."""
    json_path, png_path = paths
    cache = (warm_page_cache(data_files(inputs), options.progress) if options.warm_cache
             else CacheState("as found", 0, 0, 0.0))
    from .machine import describe_machine
    from .plot import plot
    from .report import build_record, feed_records, write_json

    machine = describe_machine(device == "cuda", inputs.notes)  # before measuring: a late NVML error loses nothing
    gpu = None
    if device == "cuda":
        from .gpu import GpuSampler

        try:
            gpu = GpuSampler()
        except IofeedError as exc:  # nvidia-ml-py missing, or NVML unable to read the GPU
            inputs.notes.append(f"no GPU utilisation: {exc}")
    # the ceiling first: a later feed that hangs, or a run cut off, still leaves every % of the ceiling
    runs = sorted((FeedRun(spec) for spec in specs), key=lambda run: run.spec.name != CEILING)
    order = {name: i for i, name in enumerate(names + (CEILING,))}

    def record(complete: bool) -> dict[str, Any]:
        done = sorted(runs + skipped, key=lambda r: order[r.spec.name])
        return build_record(
            created=now.isoformat(timespec="seconds"),
            complete=complete,
            command=command,
            machine=machine,
            page_cache=asdict(cache),
            settings={"batch_size": options.batch_size, "image_size": options.image_size, "model": model,
                      "device": device, "seconds_per_feed": options.seconds, "rounds": options.rounds,
                      "window_seconds": options.window_seconds, "warmup_seconds": options.warmup,
                      "workers": options.workers or usable_cores().amount, "seed": options.seed,
                      "memory_metric": memory_metric(), "task": options.task},
            inputs={"folder": _text(inputs.folder), "dataset": _text(inputs.dataset), "raw": _text(inputs.raw),
                    "missing": inputs.missing,
                    "notes": inputs.notes + (gpu.notes() if gpu is not None else [])},
            baseline=DETECTION_BASELINE if options.task == "detection" else BASELINE,
            feeds=feed_records(done, options.image_size, gpu),
            gpu_timeline=[asdict(s) for s in gpu.samples] if gpu is not None else [],
        )

    try:
        measure(runs, options.rounds, options.window_seconds, options.warmup, gpu, options.progress,
                slack=options.stall_seconds, after_window=lambda: write_json(record(False), json_path))
    except KeyboardInterrupt:
        for run in runs:
            if run.status == "ok" and not run.windows:
                run.stop("skipped", "not measured: the run was interrupted before its first window")
        complete = False
    else:
        complete = True
    finally:
        if gpu is not None:
            gpu.close()
    result = record(complete)
    write_json(result, json_path)
    plot(result, png_path)
    return result, json_path, png_path


def _serve_streamed(specs: list[FeedSpec], skipped: list[FeedRun],
                    results: Path) -> tuple[list[FeedSpec], list[FeedRun], Any]:
    """Start the local S3 endpoint when a streaming feed is planned, and point those feeds at it and
    at a cache folder of the bench's own, made in the `results` folder (removed by its `close()`)."""
    streamed = [s for s in specs if SOURCES[s.entry.source].served]
    if not streamed:
        return specs, skipped, None
    from .stream import LocalEndpoint

    try:
        endpoint = LocalEndpoint(Path(streamed[0].source), results)
    except IofeedError as exc:  # s3fs or moto missing
        return ([s for s in specs if s not in streamed],
                skipped + [FeedRun(s, "skipped", str(exc)) for s in streamed], None)
    return [replace(s, source=endpoint.url, endpoint=endpoint.endpoint, cache_root=str(endpoint.cache_root))
            if s in streamed else s for s in specs], skipped, endpoint


def _text(path: Path | None) -> str | None:
    return None if path is None else str(path)
