"""The training images from a sample: formats, sizes, JPEGs GPU decoders refuse, and whether
resizing them once (`iofeed preprocess`) would pay off, with measured Pillow decode rates."""
from __future__ import annotations

import io
import os
import random
import shlex
import warnings
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from time import perf_counter
from typing import Any, BinaryIO, cast

import numpy as np
from PIL import Image

from ...errors import OptionError, SampleError, SourceError
from ...format.policy import ImagePolicy
from ...format.table import RAW
from ...image.pil import encode_jpeg, is_progressive, open_rgb, resize_shorter
from ...image.sniff import SNIFF_BYTES, sniff_bytes
from ...prepare.file import prepare_file
from ...sources.folder_scan import display_path, scan_folder
from ...sources.samples import is_iofeed_dataset, open_source
from .finding import Finding

TARGET_SIDE = ImagePolicy().side  # what `iofeed preprocess` resizes to
LARGE_SIDE = 2 * TARGET_SIDE  # decoding such an image touches >= 4x the pixels training needs
PAYS_SPEEDUP = 1.3  # decode speed-up from resizing that makes preprocessing worth it


@dataclass(frozen=True)
class _Item:
    name: str  # printable path (shard@offset inside an iofeed dataset)
    open: Callable[[], BinaryIO]
    nbytes: int
    raw_size: tuple[int, int] | None = None  # (width, height) of a raw-pixel sample: nothing to decode
    path: str | None = None  # the file of a folder item (what `preprocess` would prepare)


@dataclass
class DataCheck:
    """What `check_data` found in a sample of the source."""

    source: str
    kind: str  # "folder" or "dataset"
    total: int  # files (folder) or train samples (dataset)
    sampled: int
    file_kib_mean: float
    # "jpeg", "png", ..., "raw" (pixels), "not an image", "unreadable"
    formats: dict[str, int] = field(default_factory=dict)
    modes: dict[str, int] = field(default_factory=dict)  # Pillow modes: RGB, L, CMYK, P, RGBA, ...
    progressive: list[str] = field(default_factory=list)  # sampled progressive JPEGs
    cmyk: list[str] = field(default_factory=list)  # sampled CMYK JPEGs
    bad: list[str] = field(default_factory=list)  # "path: reason" of sampled files that are not readable images
    shorter_side: dict[str, float] = field(default_factory=dict)  # mean, p5, p50, p95 in pixels
    large_share: float = 0.0  # share of images whose shorter side is >= LARGE_SIDE
    megapixels_mean: float = 0.0
    decode: dict[str, float] = field(default_factory=dict)  # images, original/resized/preprocess per sec
    findings: list[Finding] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)  # e.g. which data the traced command really read


def check_data(source: Path | str, sample: int = 2000, decode_sample: int = 100,
               decode_budget_s: float = 10.0, seed: int = 0) -> DataCheck:
    """Read the headers of up to `sample` images of `source` (an image folder or an iofeed
    dataset) and decode up to `decode_sample` of them, within about `decode_budget_s` seconds.
    Images over Pillow's decompression-bomb limit are counted in a note, not warned about one by one."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", Image.DecompressionBombWarning)
        return _check_sample(source, sample, decode_sample, decode_budget_s, seed)


def _check_sample(source: Path | str, sample: int, decode_sample: int, decode_budget_s: float,
                  seed: int) -> DataCheck:
    if sample < 1 or decode_sample < 0:
        raise OptionError(f"sample must be >= 1 and decode_sample >= 0, got {sample} and {decode_sample}")
    path = Path(source)
    kind = "dataset" if is_iofeed_dataset(path) else "folder"
    items = _dataset_items(path) if kind == "dataset" else _folder_items(path)
    picked = random.Random(seed).sample(items, min(sample, len(items)))
    check = DataCheck(source=str(path), kind=kind, total=len(items), sampled=len(picked),
                      file_kib_mean=float(np.mean([i.nbytes for i in picked])) / 1024)
    formats: Counter[str] = Counter()
    modes: Counter[str] = Counter()
    sides: list[int] = []
    pixels: list[int] = []
    readable: list[Any] = []
    limit, huge = Image.MAX_IMAGE_PIXELS, []
    for item in picked:
        if item.raw_size is not None:
            formats["raw"] += 1
            modes["RGB"] += 1
            sides.append(min(item.raw_size))
            pixels.append(item.raw_size[0] * item.raw_size[1])
            continue
        try:
            with item.open() as f:
                fmt = sniff_bytes(f.read(SNIFF_BYTES))
                if fmt is None:
                    formats["not an image"] += 1
                    check.bad.append(f"{item.name}: not an image")
                    continue
                f.seek(0)
                with Image.open(f) as img:  # reads the header only
                    size, mode, info = img.size, img.mode, img.info
        except (OSError, SyntaxError, ValueError, Image.DecompressionBombError) as exc:
            formats["unreadable"] += 1
            check.bad.append(f"{item.name}: {exc}")
            continue
        over = bool(limit) and size[0] * size[1] > limit
        if over:
            huge.append(f"{item.name} ({size[0]}x{size[1]})")
        formats[fmt] += 1
        modes[mode] += 1
        sides.append(min(size))
        pixels.append(size[0] * size[1])
        if not over:  # one over the limit does not decode under iofeed either: the note below says so
            readable.append(item)
        if fmt == "jpeg" and is_progressive(info):
            check.progressive.append(item.name)
        if fmt == "jpeg" and mode == "CMYK":
            check.cmyk.append(item.name)
    if huge:
        assert limit is not None, "an image is over the limit only where there is one"
        check.notes.append(
            f"{len(huge)} of {len(picked)} sampled images are over Pillow's decompression-bomb limit of "
            f"{limit / 1e6:.0f} MP (its warning for each is left out here), e.g. {huge[0]}: Pillow warns on every "
            f"one and refuses those over {2 * limit / 1e6:.0f} MP")
    if not sides:
        raise SourceError(f"none of the {len(picked)} sampled files in {path} is a readable image")
    check.formats, check.modes = dict(formats.most_common()), dict(modes.most_common())
    side = np.asarray(sides, dtype=np.float64)
    check.shorter_side = {"mean": float(side.mean()), **{f"p{q}": float(np.percentile(side, q)) for q in (5, 50, 95)}}
    check.large_share = float((side >= LARGE_SIDE).mean())
    check.megapixels_mean = float(np.mean(pixels)) / 1e6
    check.decode = _decode_rates(readable, decode_sample, decode_budget_s, kind == "folder", check.bad)
    check.findings = _findings(check)
    return check


def _folder_items(path: Path) -> list[_Item]:
    """Every file `iofeed preprocess` would read from the class-folder tree `path` (names only:
    nothing is read yet): the same scan, so the same classes (symlinked class folders followed,
    look-alike names refused) and the same files."""
    scan = scan_folder(path, sniff=False)
    paths = [(display_path(rel), str(scan.root / rel)) for rel in scan.files]
    # "rb": a binary file (mypy's partial does not resolve `open`'s overloads)
    return [_Item(name, cast("Callable[[], BinaryIO]", partial(open, file, "rb")), _size(file), path=file)
            for name, file in paths]


def _size(path: str) -> int:
    try:
        return os.stat(path).st_size
    except OSError:
        return 0


def _dataset_items(path: Path) -> list[_Item]:
    """The train samples of an iofeed dataset, read from their shards on demand."""
    src = open_source(path, "train")
    files = [f.decode("utf-8", "surrogateescape") for f in src.files]
    raw = src.encoding == RAW
    return [_Item(src.path_of(i), partial(_read_at, files[src.file_id[i]], int(src.offset[i]), int(src.size[i])),
                  int(src.size[i]), (int(src.width[i]), int(src.height[i])) if raw[i] else None)
            for i in range(len(src))]


def _read_at(path: str, offset: int, size: int) -> BinaryIO:
    """`size` bytes at `offset` of `path`, as a file object."""
    with open(path, "rb") as f:
        f.seek(offset)
        return io.BytesIO(f.read(size))


def _decode_rates(items: list[_Item], limit: int, budget_s: float, resized: bool,
                  bad: list[str]) -> dict[str, float]:
    """Pillow decode rate on one core for the images as they are and, with `resized`, as
    `preprocess` would write them (and the rate of `preprocess`'s own per-file work), over up to
    `limit` of `items` that decode (one whose header read but whose pixels do not, a truncated
    JPEG, is passed over and added to `bad` as "name: reason"), as many as fit in `budget_s`.
    Every step runs once untimed first: first calls
    import codecs and the resize kernel (PyTorch's: seconds), which `preprocess` workers pay
    once (its fork server imports PyTorch before they start), not per image."""
    policy = ImagePolicy()
    orig_s = small_s = prep_s = 0.0
    done = 0
    start = perf_counter()
    if items and limit:
        encode_jpeg(resize_shorter(Image.new("RGB", (2 * TARGET_SIDE, 2 * TARGET_SIDE)), TARGET_SIDE), policy.quality)
        _time_one(items[0], resized, policy)
    startup_s = perf_counter() - start
    start = perf_counter()
    for item in items:
        if done >= limit or perf_counter() - start > budget_s:
            break
        times = _time_one(item, resized, policy)
        if isinstance(times, str):
            bad.append(f"{item.name}: {times}")
        if not isinstance(times, tuple):
            continue
        orig_s, small_s, prep_s = orig_s + times[0], small_s + times[1], prep_s + times[2]
        done += 1
    if not done:
        return {}
    rates = {"images": float(done), "original_per_sec": done / orig_s}
    if resized:
        rates.update(resized_per_sec=done / small_s, preprocess_per_sec=done / prep_s, startup_s=startup_s)
    return rates


def preprocess_estimate_s(images: int, decode: dict[str, float]) -> tuple[float, float]:
    """(seconds, cores) `iofeed preprocess` of `images` files should take here: the start-up
    its workers pay once (the untimed first calls) plus the measured per-file rate over the
    cores that the machine's other work (load average) leaves free."""
    cores = len(os.sched_getaffinity(0))
    free = max(1.0, min(float(cores), cores + 1 - os.getloadavg()[0]))  # this check is one of the load
    return decode.get("startup_s", 0.0) + images / decode["preprocess_per_sec"] / free, free


def _time_one(item: _Item, resized: bool, policy: ImagePolicy) -> tuple[float, float, float] | str | None:
    """Seconds to decode `item` as stored and, with `resized`, to prepare it as `preprocess`
    does (`prepare_file`) and to decode what it writes; why not when it does not decode, None
    when what `preprocess` writes of it is not a JPEG to time."""
    with item.open() as f:
        data = f.read()
    try:
        t0 = perf_counter()
        open_rgb(data)
        original = perf_counter() - t0
    except SampleError as exc:
        return str(exc)
    if not resized or item.path is None:
        return original, 0.0, 0.0
    t0 = perf_counter()
    prepared = prepare_file(0, item.path, policy)
    prepare = perf_counter() - t0
    if prepared.data is None or prepared.encoding != "jpeg":
        return None
    t0 = perf_counter()
    open_rgb(prepared.data)
    return original, perf_counter() - t0, prepare


def _findings(check: DataCheck) -> list[Finding]:
    """Problems in the sample, each with the numbers and the fix."""
    out, n, src = [], check.sampled, shlex.quote(check.source)
    jpegs = check.formats.get("jpeg", 0)
    if check.progressive or check.cmyk:
        evidence = [f"{len(names)} of {jpegs} sampled JPEGs are {what}, e.g. {names[0]}"
                    for names, what in ((check.progressive, "progressive"), (check.cmyk, "CMYK")) if names]
        out.append(Finding(
            "gpu-decoder-quirks", "JPEGs that GPU hardware decoders refuse", evidence,
            ["the A100/H100 hardware JPEG decoder takes baseline JPEGs only and nvJPEG takes 1 or 3 "
             "channels: progressive and CMYK files fall back to slower paths (or fail)",
             f"`iofeed preprocess {src}` rewrites them as baseline RGB JPEGs"]))
    others = {k: v for k, v in check.formats.items() if k not in ("jpeg", "raw", "not an image", "unreadable")}
    if others:
        mix = ", ".join(f"{v} {k}" for k, v in others.items())
        out.append(Finding(
            "not-jpeg", "images that are not JPEG: slower to decode on the CPU, not decoded on the GPU",
            [f"{sum(others.values())} of {n} sampled files: {mix}"],
            [f"`iofeed preprocess {src}` converts them to baseline JPEG"]))
    if check.bad:
        out.append(Finding(
            "bad-files", "files that are not readable images: a DataLoader fails on them mid-epoch",
            [f"{len(check.bad)} of {n} sampled files, e.g. {check.bad[0]}"],
            [f"`iofeed preprocess {src}` leaves them out and lists them in rejected.jsonl"]))
    pays = _preprocess_evidence(check)
    if pays:
        out.append(Finding(
            "preprocess-pays", f"resizing once to a {TARGET_SIDE} px shorter side would pay off", pays,
            [f"`iofeed preprocess {src}` (shorter side {TARGET_SIDE}, baseline JPEG), then train from the dataset"]))
    return out


def _preprocess_evidence(check: DataCheck) -> list[str]:
    """The numbers showing that a resized copy decodes clearly faster; empty when it would not."""
    if check.kind != "folder" or "resized_per_sec" not in check.decode:
        return []
    d, side = check.decode, check.shorter_side
    speedup = d["resized_per_sec"] / d["original_per_sec"]
    if speedup < PAYS_SPEEDUP or side["p50"] <= TARGET_SIDE:  # most images would not be resized
        return []
    once_s, cores = preprocess_estimate_s(check.total, d)
    return [f"mean shorter side {side['mean']:.0f} px (median {side['p50']:.0f}) vs {TARGET_SIDE} needed; "
            f"{check.large_share:.0%} of images are >= {LARGE_SIDE} px",
            f"Pillow decode on one core: {d['original_per_sec']:,.0f} img/s as stored, "
            f"{d['resized_per_sec']:,.0f} img/s resized ({speedup:.1f}x), over {d['images']:.0f} images",
            f"resizing all {check.total:,} once: about {_duration(once_s)} on {cores:g} free "
            f"core{'s' if cores != 1 else ''}"]


def _duration(seconds: float) -> str:
    """`42 s` or `3.5 min`."""
    return f"{seconds:.0f} s" if seconds < 90 else f"{seconds / 60:.1f} min"
