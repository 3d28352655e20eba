"""What the `iofeed` commands print: preprocess's summary, a dataset's manifest, what a
verification checked."""
from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from ..format.manifest import IMAGES_AS_IS, Manifest

if TYPE_CHECKING:
    from ..prepare.run import PreprocessSummary
    from ..prepare.verify import Verification


def plural(n: int, noun: str) -> str:
    """"1 shard", "2 shards"."""
    return f"{n:,} {noun}{'' if n == 1 else 's'}"


def byte_size(n: float) -> str:
    """A byte count in the unit that shows it: "830 bytes", "12.4 KiB", "1.1 MiB", "5.42 GiB" (a
    small dataset read "0.0 MiB")."""
    for unit, scale in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if n >= scale:
            return f"{n / scale:,.2f} {unit}" if unit == "GiB" else f"{n / scale:,.1f} {unit}"
    return f"{n:,.0f} bytes"


def names(items: list[str], shown: int = 3) -> str:
    """The first `shown` of `items`, with ", ..." only when there are more."""
    return ", ".join(items[:shown]) + (", ..." if len(items) > shown else "")


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
        print(f"  empty classes {len(summary.empty_classes):,} class folders without an image, "
              f"kept as labels with 0 samples: {names(summary.empty_classes, 5)}")
    if summary.several_classes:
        print(f"  multi-label   {plural(summary.several_classes, 'sample')} with several classes (e.g. "
              f"{summary.several_example}): the targets are multi_label; load them with "
              "output=iofeed.Output(target=\"multi_hot\")")
    if summary.one_sample_classes:
        print(f"  classes       {summary.one_sample_classes}")
    for note in summary.notes:
        print(f"  source        {note}")
    if summary.duplicates.line():
        print(f"  duplicates    {summary.duplicates.line()}")
    for path in summary.stale_removed:
        print(f"  removed       {path} (left by an interrupted run)")
    print(f"  bytes         {byte_size(summary.bytes_in)} in, {byte_size(summary.bytes_out)} out")
    print(f"  time          {summary.seconds:.1f} s ({summary.images_per_sec:,.0f} images/sec)")


def print_manifest(path: Path | str, manifest: Manifest) -> None:
    """The manifest of the dataset at `path`, as a short report."""
    src = manifest.source
    print(f"{path}  ({manifest.format} v{manifest.version}, {manifest.created_by})")
    print(f"  classes       {len(manifest.classes)} ({names(manifest.classes)})")
    for name, info in manifest.splits.items():
        total = sum(s["bytes"] for s in info.shards)
        print(f"  {name:<13} {info.samples:,} samples in {plural(len(info.shards), 'shard')}, {byte_size(total)}")
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
              f"{byte_size(on_disk)} on disk against ~{byte_size(stored['as_jpeg_bytes_estimate'])} as JPEG "
              f"({on_disk / max(stored['as_jpeg_bytes_estimate'], 1):.1f}x); the page cache should hold it")
    print(f"  source        {src['path']}: {src['found']:,} found, {src['accepted']:,} accepted, "
          f"{src['rejected']:,} rejected")
    for reason, count in src["rejected_by_reason"].items():
        print(f"    {count:>6,}  {reason}")
    if image["encoding"] == IMAGES_AS_IS:
        return
    mean_w, mean_h = src["mean_size"]
    print(f"  source images mean {mean_w:.0f}x{mean_h:.0f}, modes {src['modes']}, {byte_size(src['bytes_in'])}")


def verified_line(checked: Verification) -> str:
    """What a verification without problems checked, exactly: what it read, hashed, decoded and
    compared, and what it could not (shards at URLs are never fetched)."""
    local, unhashed = checked.shards - checked.streamed, checked.shards - checked.streamed - checked.hashed
    parts = ([] if not local else
             ["shard sizes and sha256 match the manifest" if not unhashed else
              f"shard sizes match; {plural(unhashed, 'shard')} without a sha256 (written before checksums) not hashed",
              "tables, indexes and labels agree"])
    parts += [f"{checked.relabelled:,} labels read again from the shards"] if checked.relabelled else []
    parts += [f"{checked.targets:,} targets-file rows match their shards"] if checked.targets else []
    raw = checked.samples - checked.decoded - checked.unread
    parts += [f"all {checked.decoded:,} JPEG samples decode"] if checked.decoded else []
    parts += [f"{raw:,} raw samples have their sizes"] if raw > 0 else []
    if checked.streamed:
        parts.append(f"{plural(checked.streamed, 'shard')} at URLs ({checked.unread:,} samples) not read: only "
                     "their index and table rows checked (the node cache checks each one's size and sha256 "
                     "when it fetches it; verify a local copy to decode them)")
    return f"{checked.samples:,} samples in {plural(checked.shards, 'shard')}: " + "; ".join(parts)
