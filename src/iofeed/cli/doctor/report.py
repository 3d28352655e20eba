"""A checkup as text for the terminal and as a JSON-ready dict."""
from __future__ import annotations

import math
from dataclasses import asdict
from typing import Any

import numpy as np

from .checkup import Checkup
from .command import command_text
from .finding import Finding
from .stats import summarize
from .trace import Trace

FORMAT, VERSION = "iofeed-doctor", 1
MAX_JSON_SAMPLES = 6000  # longer traces keep every k-th sample in the JSON
GIB = 2**30


def to_dict(checkup: Checkup) -> dict[str, Any]:
    """environment, data, trace (command, summary, samples) and every finding with its area."""
    env = {k: v for k, v in asdict(checkup.environment).items() if k != "findings"}
    data = checkup.data and {k: v for k, v in asdict(checkup.data).items() if k != "findings"}
    trace = None
    if checkup.recording is not None:
        rec = checkup.recording
        stride = max(1, math.ceil(len(rec.trace.t) / MAX_JSON_SAMPLES))
        trace = {"command": rec.command, "exit_code": rec.exit_code, "seconds": rec.seconds,
                 "interrupted": rec.interrupted, "notes": rec.notes, "summary": summarize(rec.trace),
                 "stride": stride, "samples": _thinned(rec.trace, stride)}
    return {"format": FORMAT, "version": VERSION, "environment": env, "data": data, "trace": trace,
            "findings": [{"area": area, **asdict(f)} for area, f in _areas(checkup)]}


def _thinned(trace: Trace, stride: int) -> dict[str, Any]:
    """Every `stride`-th sample, rounded to 0.1 (% and bytes alike), as JSON-ready lists."""
    arrays = {name: getattr(trace, name) for name in trace.__dataclass_fields__}
    return Trace(**{name: np.round(array if name == "gpu_mem_total" else array[..., ::stride], 1)
                    for name, array in arrays.items()}).to_dict()


def _areas(checkup: Checkup) -> list[tuple[str, Finding]]:
    data = checkup.data.findings if checkup.data else []
    return ([("environment", f) for f in checkup.environment.findings] + [("data", f) for f in data]
            + [("trace", f) for f in checkup.findings])


def render(checkup: Checkup) -> str:
    """The whole checkup for the terminal."""
    failed = command_failure(checkup)
    lines = ["iofeed doctor", *([f"  {failed}"] if failed else []), *_environment(checkup)]
    if checkup.data is not None:
        lines += _data(checkup)
    if checkup.recording is not None:
        lines += _trace(checkup)
    findings = _areas(checkup)
    lines.append(f"\nfindings ({len(findings)})" if findings else
                 "\nno findings" + (" (the traced command failed: see above)" if failed else ""))
    for area, f in findings:
        lines.append(f"  [{f.code}] {f.title} ({area}{', heuristic' if f.heuristic else ''})")
        lines += [f"      - {e}" for e in f.evidence] + [f"      -> {a}" for a in f.advice]
    lines += [f"wrote {path}" for path in checkup.files]
    return "\n".join(lines)


def command_failure(checkup: Checkup) -> str | None:
    """One line saying that the traced command failed (non-zero status, not Ctrl-C), else None."""
    rec = checkup.recording
    if rec is None or rec.interrupted or rec.exit_code == 0:
        return None
    how = (f"was killed by signal {-rec.exit_code}" if rec.exit_code < 0 else f"exited with status {rec.exit_code}")
    return (f"the traced command FAILED: `{command_text(rec.command)}` {how} after {rec.seconds:.1f} s "
            "(its own output is above); the trace covers only that run")


def _environment(checkup: Checkup) -> list[str]:
    env = checkup.environment
    v = env.versions
    shm = f"{env.shm_bytes / GIB:.1f} GiB" if env.shm_bytes is not None else "absent"
    lines = ["\nenvironment",
             f"  {env.cpu_model}: {env.cores} cores ({env.usable_cores} usable: {env.cores_because}), "
             f"RAM {env.ram_bytes / GIB:.1f} GiB "
             f"({env.ram_available_bytes / GIB:.1f} available), /dev/shm {shm}"]
    lines += [f"  GPU {i}: {g['name']}, {g['memory_bytes'] / GIB:.0f} GiB, driver {g['driver']}"
              for i, g in enumerate(env.gpus)] or [f"  GPUs: none: {env.gpu_note}"]
    lines.append(f"  python {v.get('python')}, torch {v.get('torch')}, torchvision {v.get('torchvision')}, "
                 f"Pillow {v.get('pillow')} (libjpeg-turbo {v.get('libjpeg_turbo') or 'no'}), "
                 f"DALI {v.get('dali') or 'not installed'} (import: {env.dali_import})")
    return lines


def _data(checkup: Checkup) -> list[str]:
    d = checkup.data
    assert d is not None, "the data section is written only after a data check"
    side = d.shorter_side
    rate = d.decode.get("original_per_sec")
    return ["\ndata",
            f"  {d.source} ({d.kind}): {d.total:,} files, {d.sampled:,} sampled, mean {d.file_kib_mean:.0f} KiB",
            "  formats: " + ", ".join(f"{v} {k}" for k, v in d.formats.items())
            + "; modes: " + ", ".join(f"{v} {k}" for k, v in d.modes.items()),
            f"  shorter side: median {side['p50']:.0f} px (5th-95th percentile {side['p5']:.0f}-{side['p95']:.0f}), "
            f"{d.megapixels_mean:.2f} MP mean; {len(d.progressive)} progressive, {len(d.cmyk)} CMYK JPEGs",
            f"  Pillow decode: {rate:,.0f} img/s on one core" if rate else "  Pillow decode: not measured",
            *(f"  note: {note}" for note in d.notes)]


def _trace(checkup: Checkup) -> list[str]:
    rec = checkup.recording
    assert rec is not None, "the trace section is written only after a recording"
    s = summarize(rec.trace)
    status = "interrupted" if rec.interrupted else f"exited with status {rec.exit_code}"
    lines = ["\ntrace", f"  `{command_text(rec.command)}` {status} after {rec.seconds:.1f} s; "
             f"{s['samples']} trace samples, peak memory of its processes {s['rss_peak_bytes'] / GIB:.2f} GiB"]
    if s["active_window"] is None:
        return lines + ["  no sample" if not s["samples"] else "  the GPUs were never in use"]
    t0, t1 = s["active_window"]
    if s["gpus"]:
        lines.append(f"  GPUs in use from {t0:.1f} s to {t1:.1f} s (figures below over that window)")
    lines += [f"  GPU {g['index']}: utilisation mean {g['util_mean']:.0f}% (10th/50th/90th percentile "
              f"{g['util_p10']:.0f}/{g['util_p50']:.0f}/{g['util_p90']:.0f}%), peak memory "
              f"{g['mem_peak_bytes'] / GIB:.1f} of {g['mem_total_bytes'] / GIB:.0f} GiB" for g in s.get("gpu", [])]
    cores = " ".join(f"{c:.0f}" for c in s["cpu_core_mean"])
    lines.append(f"  CPU: {s['cpu_busy_mean']:.0f}% busy (90th percentile {s['cpu_busy_p90']:.0f}%), "
                 f"iowait {s['iowait_mean']:.0f}%; per core: {cores}")
    loaders = s["loader_cpu_per_process"]
    lines.append(f"  processes: training {s['trainer_cpu_mean']:.0f}% of a core; "
                 + (f"{s['loaders_at_once']:.1f} working loader process(es) at a time, each {loaders:.0f}% of a core"
                    if loaders is not None else "no working loader processes"))
    if not s["gpus"]:
        lines.append("  no GPU: the GPU patterns were not looked for")
    return lines + [f"  note: {note}" for note in rec.notes]
