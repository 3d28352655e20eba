"""The classic ways a training job leaves its GPUs waiting, recognised in a utilisation trace.

Every figure is taken over the active window (first to last sample with a GPU at >= 5 %),
so start-up and shut-down do not count. With the GPU mean utilisation below GPU_LOW:
- data-starved: the usable cores are saturated (CPU_SATURATED) or waiting on storage (IOWAIT_HIGH);
- cpu-gpu-alternating (any GPU mean): GPU and CPU take turns: their correlation is below
  ANTI_CORRELATION and each spends IDLE_SHARE of the samples idle;
- few-workers: CPU not saturated, but the working loader processes (the command's processes other
  than the training ones, idle helpers left out) busy LOADER_SATURATED of a core or more each on
  average: measured, it comes first;
- small-batch: CPU not saturated, loaders not saturated, peak GPU memory below MEM_LOW of the device;
- few-workers (heuristic): the same with GPU memory well used.
Independently: uneven-gpu-memory (>= 2 GPUs in use, peak memory max/min >= UNEVEN_RATIO and
>= UNEVEN_MIN_BYTES apart), gpu-unused (GPUs present, never >= 5 %), no-mixed-precision
(heuristic, from the training script's text: see `precision.py`).
From the stats each iofeed loader of the command writes (`loading/stats_file.py`), GPU or not:
transform-bottleneck: the training loop waited for batches TRANSFORM_WAIT of its time while the
user's per-sample transform took TRANSFORM_SHARE of the workers' CPU time; host-normalise
(heuristic, GPUs in use): it waited as long while the loader normalised on the host.
"""
from __future__ import annotations

import shlex
from typing import Any

import numpy as np

from .finding import Finding
from .precision import mixed_precision_finding
from .stats import Window, active_window, gpu_cpu_correlation
from .trace import Trace

MIN_SAMPLES = 20  # samples of GPU activity needed to judge anything (2 s at the default 0.1 s)
GPU_LOW = 50.0  # % mean GPU utilisation below which the GPUs are underused
CPU_SATURATED = 85.0  # % mean busy over the usable cores from which the CPU is the bottleneck
IOWAIT_HIGH = 10.0  # % mean iowait from which storage is the bottleneck
ANTI_CORRELATION = -0.3  # GPU/CPU correlation below which they take turns
IDLE_SHARE = 0.15  # share of samples that GPU and CPU must each spend idle to be taking turns
GPU_IDLE = 20.0  # % GPU utilisation counted as idle
CPU_IDLE_FRACTION = 0.5  # CPU busy below this fraction of its own 90th percentile counts as idle
MEM_LOW = 0.4  # peak used / total GPU memory below which a larger batch fits
LOADER_SATURATED = 80.0  # % of one core each loader process uses, on average, from which they are the bottleneck
UNEVEN_RATIO = 1.5  # max / min peak GPU memory over the GPUs in use
UNEVEN_MIN_BYTES = 2**30  # ... and at least this far apart
GIB = 2**30
TRANSFORM_WAIT = 0.2  # share of the loop's time spent waiting for batches from which the loader holds it back
TRANSFORM_SHARE = 0.5  # share of the workers' CPU time in the user's transform from which it is the bottleneck


def diagnose(trace: Trace, command: list[str] | None = None, source: str | None = None,
             preprocessed: bool = False) -> list[Finding]:
    """Findings for `trace`; `command` (the training command) informs the mixed-precision guess
    and `source` (the data, `preprocessed` when it is an iofeed dataset already) the advice. No
    GPU in the trace: nothing to diagnose."""
    if trace.gpus == 0:
        return []
    window = active_window(trace)
    if window is None:
        return [_unused(trace)] if len(trace.t) >= MIN_SAMPLES else [_short(trace, 0, 0.0)]
    if window.samples < MIN_SAMPLES:
        return [_short(trace, window.samples, window.seconds)]
    src = source or "SRC"
    gpu, cpu, iowait = window.gpu, window.cpu_busy, float(window.iowait.mean())
    out = []
    alternating = _alternating(window)
    if alternating:
        out.append(alternating)
    if gpu.mean() < GPU_LOW:
        gpu_text = (f"mean GPU utilisation {gpu.mean():.0f}% (median {np.median(gpu):.0f}%, "
                    f"90th percentile {np.percentile(gpu, 90):.0f}%) over {window.seconds:.0f} s")
        cpu_text = (f"CPU {cpu.mean():.0f}% busy on average over {window.cpu.shape[0]} usable cores, "
                    f"iowait {iowait:.0f}%")
        if cpu.mean() >= CPU_SATURATED or iowait >= IOWAIT_HIGH:
            out.append(_starved(window, gpu_text, cpu_text, iowait, src, preprocessed))
        elif not alternating:
            mem_text = f"peak GPU memory {window.mem_peak_share:.0%} of the device"
            loader_busy = window.loader_busy
            if loader_busy is not None and loader_busy >= LOADER_SATURATED:
                out.append(_few_workers(window, gpu_text, cpu_text, mem_text, src, loader_busy))
            elif window.mem_peak_share < MEM_LOW:
                out.append(_small_batch(window, gpu_text, cpu_text, mem_text))
            else:
                out.append(_few_workers(window, gpu_text, cpu_text, mem_text, src, None))
    uneven = _uneven_memory(window)
    if uneven:
        out.append(uneven)
    precision = mixed_precision_finding(command) if command else None
    if precision:
        out.append(precision)
    return out


def _short(trace: Trace, samples: int, seconds: float) -> Finding:
    return Finding(
        "short-trace", "too little GPU activity recorded to recognise a pattern",
        [f"{samples} samples ({seconds:.1f} s) with a GPU at work, of {len(trace.t)} recorded; "
         f"{MIN_SAMPLES} are needed"],
        ["run the command for at least a minute of training steps (it can be stopped with Ctrl-C)"])


def _unused(trace: Trace) -> Finding:
    peak = float(np.nanmax(trace.gpu_util, initial=0.0))
    return Finding(
        "gpu-unused", "the command never used the GPU",
        [f"{trace.gpus} GPU(s), highest utilisation {peak:.0f}% over {float(trace.t[-1]):.0f} s"],
        ["check that the model and batches are moved to the GPU (model.to('cuda'), "
         "iofeed.loader(..., framework='torch', placement=iofeed.Placement(device='cuda')))",
         "check that torch.cuda.is_available() is True in the training environment"])


def _starved(window: Window, gpu_text: str, cpu_text: str, iowait: float, src: str,
             preprocessed: bool = False) -> Finding:
    cores = window.cpu.shape[0]
    saturated = float((window.cpu.mean(axis=1) >= 90.0).sum())
    evidence = [gpu_text, f"{cpu_text}; {saturated:.0f} of {cores} cores at >= 90% on average"]
    advice = [f"{src} is preprocessed already: `iofeed preprocess SRC --format raw` stores pixels (no decoding "
              "at train time, ~10x the disk; docs/formats.md, \"When raw pays off\")" if preprocessed else
              f"`iofeed preprocess {shlex.quote(src)}` once: resized baseline JPEGs in shards decode several "
              "times faster than full-size originals (see the data check)",
              f"decode on the GPU: iofeed.loader({src!r}, ..., engine=\"dali\") (nvJPEG takes "
              "the JPEG decode off the CPU)"]
    if iowait >= IOWAIT_HIGH:
        evidence.append(f"the cores wait on storage {iowait:.0f}% of the time (>= {IOWAIT_HIGH:.0f}%)")
        advice += ["copy the data to local NVMe or RAM (/dev/shm); preprocessed shards are read sequentially",
                   f"keep more reads in flight: iofeed.loader(..., workers={2 * cores}) (more workers than cores)"]
    else:
        advice.append(f"more workers will not help: all {cores} cores are busy")
    return Finding("data-starved", "the GPU is waiting on data: the input pipeline cannot keep up", evidence, advice)


def _alternating(window: Window) -> Finding | None:
    gpu, cpu = window.gpu, window.cpu_busy
    correlation = gpu_cpu_correlation(window)
    gpu_idle = float((gpu < GPU_IDLE).mean())
    cpu_idle = float((cpu < CPU_IDLE_FRACTION * np.percentile(cpu, 90)).mean())
    if correlation is None or correlation >= ANTI_CORRELATION or min(gpu_idle, cpu_idle) < IDLE_SHARE:
        return None
    return Finding(
        "cpu-gpu-alternating", "CPU and GPU are busy in turns instead of together",
        [f"correlation of GPU utilisation with CPU busy {correlation:+.2f} (< {ANTI_CORRELATION})",
         f"GPU idle (< {GPU_IDLE:.0f}%) in {gpu_idle:.0%} of samples; CPU idle (< half its 90th "
         f"percentile) in {cpu_idle:.0%}",
         f"mean GPU utilisation {gpu.mean():.0f}%"],
        ["prepare the next batches while the GPU computes: iofeed.loader(..., "
         "resources=iofeed.Resources(prefetch=4)) "
         "(torch DataLoader: num_workers > 0, prefetch_factor, persistent_workers=True)",
         "copy batches asynchronously: pinned memory and .to('cuda', non_blocking=True)",
         "avoid a sync each step (loss.item(), printing tensors); log every N steps"])


def _small_batch(window: Window, gpu_text: str, cpu_text: str, mem_text: str) -> Finding:
    room = MEM_LOW / max(window.mem_peak_share, 1e-6)
    return Finding(
        "small-batch", "GPU utilisation and memory are both low: the batch is too small for the GPU",
        [gpu_text, f"{mem_text} (< {MEM_LOW:.0%})", f"{cpu_text}: the CPU is not the bottleneck"],
        [f"raise batch_size (memory has room for several times the batch: {room:.0f}x still stays "
         f"under {MEM_LOW:.0%}), e.g. iofeed.loader(..., batch_size=2 * current), scaling the "
         "learning rate with it",
         "or fuse the small steps: torch.compile(model) / CUDA graphs cut per-step launch overhead"])


def _few_workers(window: Window, gpu_text: str, cpu_text: str, mem_text: str, src: str,
                 loader_busy: float | None) -> Finding:
    """Too few loader workers: measured when `loader_busy` (% of a core per loader process) is
    given and saturated, else guessed from idle cores and well-used GPU memory."""
    cores = window.cpu.shape[0]
    busy_cores = float(window.cpu_busy.mean()) * cores / 100
    evidence = [gpu_text, f"{cpu_text}: about {busy_cores:.1f} of {cores} cores' worth of work"]
    if loader_busy is not None:
        evidence.append(f"{window.loaders_at_once:.0f} loader process(es) at a time, each {loader_busy:.0f}% of a "
                        f"core busy on average (>= {LOADER_SATURATED:.0f}%): "
                        "they are the bottleneck while cores are idle")
        title = "the GPU is waiting on too few loader workers: each one is saturated while cores are idle"
    else:
        evidence.append(mem_text)
        title = "the GPU is underused while most cores are idle: probably too few loader workers"
    return Finding(
        "few-workers", title, evidence,
        [f"let iofeed size the pool: iofeed.loader({src!r}, ..., workers=None) autotunes up to "
         f"all cores; or workers={max(1, cores - 1)}",
         "torch DataLoader: num_workers=os.cpu_count() - 1 (not 0, which loads in the training process)",
         f"then, if all cores are busy and the GPU still waits: `iofeed preprocess {shlex.quote(src)}`, "
         "or decode on the GPU with engine=\"dali\""],
        heuristic=loader_busy is None)


def _uneven_memory(window: Window) -> Finding | None:
    used = window.used
    if len(used) < 2:
        return None
    peak = window.gpu_mem[used].max(axis=1)
    heavy, light = int(np.argmax(peak)), int(np.argmin(peak))
    ratio = peak[heavy] / max(peak[light], 1.0)
    if ratio < UNEVEN_RATIO or peak[heavy] - peak[light] < UNEVEN_MIN_BYTES:
        return None
    per_gpu = ", ".join(f"GPU {i} {p / GIB:.1f} GiB" for i, p in zip(used, peak))
    utils = ", ".join(f"GPU {i} {u:.0f}%" for i, u in zip(used, window.gpu_util[used].mean(axis=1)))
    evidence = [f"peak memory {per_gpu}: {ratio:.1f}x from most to least (>= {UNEVEN_RATIO}x)",
                f"mean utilisation {utils}"]
    if used[heavy] == 0:
        evidence.append("GPU 0 carries the most: DataParallel gathers outputs and keeps the master weights there")
    return Finding(
        "uneven-gpu-memory", "GPU memory is uneven across GPUs: the DataParallel signature", evidence,
        ["use DistributedDataParallel, one process per GPU: torchrun --nproc_per_node=N train.py",
         "give each rank its part of the data: iofeed.loader(..., placement=iofeed.Placement(rank=rank, "
         "world_size=world_size))"])


def transform_finding(loaders: list[dict[str, Any]]) -> Finding | None:
    """"Your transform is the bottleneck", from loaders' stats (`loader.stats.as_dict()` with
    `workers` and `elapsed_seconds`): the first loader whose consumer waited TRANSFORM_WAIT of its
    time while its transform took TRANSFORM_SHARE of its workers' CPU time (CPU, not wall time:
    on a shared machine the workers also wait for a core)."""
    for stats in loaders:
        elapsed, workers = stats.get("elapsed_seconds") or 0.0, stats.get("workers") or 1
        name, spent = stats.get("settings", {}).get("transform"), stats.get("transform_seconds") or 0.0
        cpu = stats.get("worker_cpu_seconds") or 0.0
        if not name or elapsed <= 0 or cpu <= 0 or not stats.get("images"):
            continue
        waited, share = stats.get("wait_seconds", 0.0) / elapsed, spent / cpu
        if waited < TRANSFORM_WAIT or share < TRANSFORM_SHARE:
            continue
        return Finding(
            "transform-bottleneck", f"your transform is the bottleneck: {name} holds the loader back",
            [f"transform {name}: {1000 * spent / stats['images']:.1f} CPU ms per image, {share:.0%} of "
             f"the CPU time of {workers} loader worker(s) (>= {TRANSFORM_SHARE:.0%})",
             f"the training loop waited for batches {waited:.0%} of {elapsed:.0f} s (>= {TRANSFORM_WAIT:.0%})"],
            ["move the heavy steps to where the batch ends up: batch_transform= (torchvision v2 or kornia on "
             "GPU tensors) runs once per batch on the device",
             "let iofeed do crop, resize, flip and normalisation (augment=iofeed.Recipe(...)): not again in the "
             "transform",
             "more workers while cores are idle: iofeed.loader(..., workers=None) autotunes up to the usable cores",
             "watch the cost as you change it: loader.stats.transform_ms_per_image"])
    return None


def host_normalise_finding(loaders: list[dict[str, Any]], gpus: int) -> Finding | None:
    """"Batches normalised on one host thread while the GPU waits" (heuristic: the wait may have
    other causes): with GPUs in the trace, the first loader that normalised on the host
    (`settings["normalise_on"] == "host"`) while its training loop waited TRANSFORM_WAIT of its time."""
    for stats in loaders if gpus else []:
        elapsed = stats.get("elapsed_seconds") or 0.0
        if stats.get("settings", {}).get("normalise_on") != "host" or elapsed <= 0:
            continue
        waited = stats.get("wait_seconds", 0.0) / elapsed
        if waited < TRANSFORM_WAIT:
            continue
        return Finding(
            "host-normalise", "batches are normalised on one host thread while the GPU waits",
            [f"a loader normalised its batches on the host (stats.settings['normalise_on'] == 'host') "
             f"with {gpus} GPU(s) in use: one thread, ~0.15 ms per 224 px image",
             f"the training loop waited for batches {waited:.0%} of {elapsed:.0f} s (>= {TRANSFORM_WAIT:.0%})"],
            ["framework='torch': Placement(device='cuda'); framework='jax': GPU devices in Placement(sharding=...)",
             "framework='keras' on PyTorch follows Keras' device: leave KERAS_TORCH_DEVICE unset or 'cuda'",
             "framework='tf' and Keras on TensorFlow normalise on the host (a tf.data map runs on the CPU): "
             "hand out uint8 (augment='uint8') and normalise inside the model, where it runs on the GPU"],
            heuristic=True)
    return None
