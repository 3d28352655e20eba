"""Human-readable summaries printed by the command line."""
from __future__ import annotations

from pathlib import Path

from .manifest import Manifest
from .preprocess import PreprocessSummary


def _mib(n: float) -> str:
    return f"{n / 2**20:,.1f} MiB"


def print_preprocess_summary(summary: PreprocessSummary) -> None:
    """What preprocess read, wrote and rejected, and how fast."""
    written = ", ".join(f"{name} {count:,}" for name, count in summary.written.items())
    print(f"iofeed dataset written to {summary.out}")
    print(f"  images found  {summary.found:,}")
    print(f"  written       {written}")
    rejected = sum(summary.rejected.values())
    print(f"  rejected      {rejected:,}" + (f" (see {summary.out / 'rejected.jsonl'})" if rejected else ""))
    for reason, count in sorted(summary.rejected.items(), key=lambda kv: -kv[1]):
        print(f"    {count:>6,}  {reason}")
    print(f"  bytes         {_mib(summary.bytes_in)} in, {_mib(summary.bytes_out)} out")
    print(f"  time          {summary.seconds:.1f} s ({summary.images_per_sec:,.0f} images/sec)")


def print_manifest(path: Path, manifest: Manifest) -> None:
    """The manifest of the dataset at `path`, as a short report."""
    src = manifest.source
    print(f"{path}  ({manifest.format} v{manifest.version}, {manifest.created_by})")
    print(f"  classes       {len(manifest.classes)} ({', '.join(manifest.classes[:3])}, ...)")
    for name, info in manifest.splits.items():
        size = sum(s["bytes"] for s in info.shards)
        print(f"  {name:<13} {info.samples:,} samples in {len(info.shards)} shards, {_mib(size)}")
    image = manifest.image
    print(f"  images        {image['encoding']}, shorter side {image['shorter_side']}, quality {image['quality']}")
    stored = src.get("stored")
    if stored and stored["samples"]["raw"]:
        on_disk = stored["bytes"]["jpeg"] + stored["bytes"]["raw"]
        print(f"  stored        {stored['samples']['raw']:,} raw, {stored['samples']['jpeg']:,} JPEG: "
              f"{_mib(on_disk)} on disk against ~{_mib(stored['as_jpeg_bytes_estimate'])} as JPEG "
              f"({on_disk / max(stored['as_jpeg_bytes_estimate'], 1):.1f}x); the page cache should hold it")
    print(f"  source        {src['path']}: {src['found']:,} found, {src['accepted']:,} accepted, {src['rejected']:,} rejected")
    for reason, count in src["rejected_by_reason"].items():
        print(f"    {count:>6,}  {reason}")
    mean_w, mean_h = src["mean_size"]
    print(f"  source images mean {mean_w:.0f}x{mean_h:.0f}, modes {src['modes']}, {_mib(src['bytes_in'])}")
