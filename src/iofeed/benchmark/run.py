"""`iofeed bench` from options to results: inputs, feed plan, page cache, measurement, record, files."""
from __future__ import annotations

from dataclasses import asdict
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from ..errors import IofeedError, require
from ..prepare.scan import find_class_root
from ..system import usable_cores
from .feeds import BASELINE, CATALOGUE, CEILING, FeedSpec, dali_installed
from .inputs import CacheState, Inputs, data_files, resolve_inputs, warm_page_cache
from .measure import FeedRun, measure
from .options import BenchOptions


def pick_device() -> str:
    """"cuda" when PyTorch sees a GPU, else "cpu"."""
    torch = require("torch", "bench")
    return "cuda" if torch.cuda.is_available() else "cpu"


def _classes(inputs: Inputs) -> int:
    """Number of classes, for the model's last layer."""
    if inputs.dataset is not None:
        from ..format.manifest import Manifest

        return len(Manifest.read(inputs.dataset).classes)
    if inputs.folder is not None:
        return sum(1 for d in find_class_root(inputs.folder).iterdir() if d.is_dir() and not d.name.startswith("."))
    return 1000


def plan_feeds(names: tuple[str, ...], inputs: Inputs, options: BenchOptions, device: str,
               model: str) -> tuple[list[FeedSpec], list[FeedRun]]:
    """Specs of the feeds to measure, and runs already marked skipped (with the reason)."""
    workers = options.workers or usable_cores().amount
    classes = _classes(inputs) if model != "none" else 1000
    specs, skipped = [], []
    for name in names + ((CEILING,) if model != "none" else ()):
        entry = CATALOGUE.get(name)
        reads = entry.reads if entry else ""
        source = inputs.path(reads)
        spec = FeedSpec(name, str(source or ""), 1 if name == "torchvision-1w" else workers, options.batch_size,
                        options.image_size, device, options.seed, model, classes)
        if entry and entry.needs_dali and not dali_installed():
            skipped.append(FeedRun(spec, "skipped", "NVIDIA DALI is not installed"))
        elif entry and entry.gpu_augment and device != "cuda":
            skipped.append(FeedRun(spec, "skipped", "augments on the GPU: needs a CUDA GPU"))
        elif reads and source is None:
            skipped.append(FeedRun(spec, "skipped", inputs.missing.get(reads, f"no {reads} to read")))
        else:
            specs.append(spec)
    return specs, skipped


def run_benchmark(options: BenchOptions, command: str) -> tuple[dict[str, Any], Path, Path]:
    """Measure, write the JSON and PNG, and return (record, JSON path, PNG path)."""
    options.check(tuple(CATALOGUE))
    names = options.feeds or tuple(CATALOGUE)
    device = pick_device()
    model = options.model or ("resnet50" if device == "cuda" else "none")
    needed = {CATALOGUE[n].reads for n in names if not (CATALOGUE[n].gpu_augment and device != "cuda")}
    inputs = resolve_inputs(options.source, needed, options.progress)
    specs, skipped = plan_feeds(names, inputs, options, device, model)
    cache = (warm_page_cache(data_files(inputs), options.progress) if options.warm_cache
             else CacheState("as found", 0, 0, 0.0))
    gpu = None
    if device == "cuda":
        from .gpu import GpuSampler

        try:
            gpu = GpuSampler()
        except IofeedError as exc:  # nvidia-ml-py missing, or NVML unable to read the GPU
            inputs.notes.append(f"no GPU utilisation: {exc}")
    try:
        runs, metric = measure(specs, options.rounds, options.window_seconds, options.warmup, gpu, options.progress)
    finally:
        if gpu is not None:
            gpu.close()
    order = {name: i for i, name in enumerate(names + (CEILING,))}
    runs = sorted(runs + skipped, key=lambda r: order[r.spec.name])
    from .machine import describe_machine
    from .report import build_record, feed_records, write_json

    now = datetime.now(timezone.utc)
    record = build_record(
        created=now.isoformat(timespec="seconds"),
        command=command,
        machine=describe_machine(device == "cuda"),
        page_cache=asdict(cache),
        settings={"batch_size": options.batch_size, "image_size": options.image_size, "model": model,
                  "device": device, "seconds_per_feed": options.seconds, "rounds": options.rounds,
                  "window_seconds": options.window_seconds, "warmup_seconds": options.warmup,
                  "workers": options.workers or usable_cores().amount, "seed": options.seed, "memory_metric": metric},
        inputs={"folder": _text(inputs.folder), "dataset": _text(inputs.dataset), "raw": _text(inputs.raw),
                "missing": inputs.missing,
                "notes": inputs.notes},
        baseline=BASELINE,
        feeds=feed_records(runs, options.image_size, gpu),
        gpu_timeline=[asdict(s) for s in gpu.samples] if gpu is not None else [],
    )
    json_path, png_path = options.outputs(now)
    write_json(record, json_path)
    from .plot import plot

    plot(record, png_path)
    return record, json_path, png_path


def _text(path: Path | None) -> str | None:
    return None if path is None else str(path)
