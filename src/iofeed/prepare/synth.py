"""A Caltech-256-shaped stand-in: the real layout, class names, counts, image sizes and quirks.

Images are smooth multi-scale colour fields with hard-edged shapes and grain, JPEG-encoded,
so they cost about what real photos cost to decode. Every image is a pure function of
(seed, class, index): the same seed gives byte-identical files whatever the worker count.
"""
from __future__ import annotations

import io
import shutil
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np
from PIL import Image, ImageDraw

from ..errors import OptionError
from ..runtime.processes import resolve_workers, safe_context
from ..runtime.progress import progress as progress_bar
from .caltech_names import CALTECH256_CLASSES

ROOT_NAME = "256_ObjectCategories"
TOTAL_IMAGES = 30_607
MIN_PER_CLASS, MAX_PER_CLASS = 80, 827
_KNOWN_COUNTS = {256: 827, 250: 800, 144: 798, 252: 435, 231: 358}  # class index -> real count
_DOG, _SPIDER = 55, 197  # 056.dog holds the nested greg/ folder, 198.spider the stray RENAME2
_GREG_IMAGES = 5
_MAX_SIDE, _HUGE_SIDE, _SMALL_SET_MAX_SIDE = 4000, 7900, 1200
_GRAY_SHARE = 0.014
_SPECIALS = {"cmyk": 3, "progressive": 2, "png": 1}  # rare file kinds: how many of each
_GRAIN_SIDE = 600  # grain is drawn at most this many pixels across, then upscaled
_QUALITY = (75, 96)  # JPEG quality range (high end exclusive)
_GRAIN = (0.06, 0.22)  # grain blend weight range
_RENAME2 = "# leftover rename notes, as in the real 198.spider folder\nmv spider*.jpg .\n"


@dataclass(frozen=True)
class SynthSummary:
    """What `synth_caltech256` wrote."""

    root: Path
    images: int
    classes: int
    bytes: int
    seconds: float


class ImageSpec(NamedTuple):
    """One image to make."""

    path: str  # relative to the 256_ObjectCategories folder
    cls: int  # 0-based class index
    index: int  # type: ignore[assignment]  # a field that shadows tuple.index: 1-based index inside the class
    width: int
    height: int
    kind: str  # "rgb", "gray", "cmyk", "progressive" or "png" (a PNG with alpha named .jpg)


def class_counts(per_class: int | None = None) -> list[int]:
    """Images per class: `per_class` each, or a fixed Caltech-256-like spread of 30,607."""
    n = len(CALTECH256_CLASSES)
    if per_class is not None:
        return [per_class] * n
    free = [c for c in range(n) if c not in _KNOWN_COUNTS]
    extra = TOTAL_IMAGES - sum(_KNOWN_COUNTS.values()) - MIN_PER_CLASS * len(free)
    share = np.random.default_rng(256).lognormal(0.0, 1.0, len(free))
    share *= extra / share.sum()
    add = np.floor(share).astype(int)
    add[np.argsort(add - share)[: extra - add.sum()]] += 1  # largest remainders round up
    counts = dict(_KNOWN_COUNTS) | dict(zip(free, (MIN_PER_CLASS + add).tolist()))
    return [counts[c] for c in range(n)]


def _locations(counts: list[int]) -> Iterator[tuple[int, int, str]]:
    """(class, index, relative path) of every image; the dog class's last few live in greg/."""
    for cls, n in enumerate(counts):
        in_greg = max(1, min(_GREG_IMAGES, n // 2)) if cls == _DOG else 0
        for i in range(1, n + 1):
            sub = "greg/" if i > n - in_greg else ""
            yield cls, i, f"{CALTECH256_CLASSES[cls]}/{sub}{cls + 1:03d}_{i:04d}.jpg"


def _sizes(rng: np.random.Generator, n: int, max_side: int) -> tuple[np.ndarray, np.ndarray]:
    """Widths and heights: heavy-tailed long side, mostly landscape, like the real set."""
    long = np.clip(np.exp(np.log(325) + 0.40 * rng.standard_t(4, n)), 100, max_side)
    short = long * np.clip(rng.normal(0.80, 0.14, n), 0.35, 1.0)
    landscape = rng.random(n) < 0.72
    width, height = np.where(landscape, long, short), np.where(landscape, short, long)
    return width.round().astype(int), height.round().astype(int)


def plan_images(counts: list[int], seed: int = 0, max_side: int | None = None) -> list[ImageSpec]:
    """Every image's path, size and kind; `max_side` caps all sizes (None: full-size set)."""
    rng = np.random.default_rng([seed])
    where = list(_locations(counts))
    width, height = _sizes(rng, len(where), max_side or _MAX_SIDE)
    kinds = ["gray"] * max(1, round(_GRAY_SHARE * len(where)))
    kinds += [kind for kind, k in _SPECIALS.items() for _ in range(k)]
    picks = rng.choice(len(where), len(kinds) + 1, replace=False)
    width[picks[0]] = height[picks[0]] = max_side or _HUGE_SIDE  # one very large image
    kind_of = dict(zip(picks[1:].tolist(), kinds))
    return [
        ImageSpec(path, cls, i, int(width[j]), int(height[j]), kind_of.get(j, "rgb"))
        for j, (cls, i, path) in enumerate(where)
    ]


def _field(rng: np.random.Generator, size: tuple[int, int], cells: int, mode: str = "RGB") -> Image.Image:
    """Random values on a coarse grid about `cells` wide, smoothly upscaled to `size`."""
    gw, gh = max(2, cells), max(2, round(cells * size[1] / size[0]))
    grid = Image.frombytes(mode, (gw, gh), rng.bytes(gw * gh * len(mode)))
    return grid.resize(size, Image.Resampling.BICUBIC)


def _draw_shapes(rng: np.random.Generator, img: Image.Image) -> None:
    """A few flat-coloured ellipses, boxes and lines: hard edges, as objects have."""
    draw = ImageDraw.Draw(img)
    w, h = img.size
    for _ in range(int(rng.integers(3, 12))):
        (x0, x1), (y0, y1) = np.sort(rng.integers(0, w, 2)), np.sort(rng.integers(0, h, 2))
        box, fill = (int(x0), int(y0), int(x1), int(y1)), tuple(rng.integers(0, 256, 3).tolist())
        shape = int(rng.integers(3))
        if shape == 0:
            draw.ellipse(box, fill=fill)
        elif shape == 1:
            draw.rectangle(box, fill=fill)
        else:
            draw.line(box, fill=fill, width=int(rng.integers(1, 8)))


def _grain(rng: np.random.Generator, size: tuple[int, int]) -> Image.Image:
    """Luminance grain: fine on small images, drawn coarser and upscaled on big ones."""
    scale = min(0.5, _GRAIN_SIDE / max(size))
    gw, gh = max(2, round(size[0] * scale)), max(2, round(size[1] * scale))
    grain = Image.frombytes("L", (gw, gh), rng.bytes(gw * gh))
    return grain.resize(size, Image.Resampling.BILINEAR).convert("RGB")


def render(spec: ImageSpec, seed: int) -> bytes:
    """The encoded file of one image: a pure function of (seed, spec)."""
    rng = np.random.default_rng([seed, spec.cls, spec.index])
    size = (spec.width, spec.height)
    coarse, medium = _field(rng, size, int(rng.integers(2, 6))), _field(rng, size, int(rng.integers(12, 40)))
    img = Image.blend(coarse, medium, 0.35)
    _draw_shapes(rng, img)
    img = Image.blend(img, _grain(rng, size), float(rng.uniform(*_GRAIN)))
    quality = int(rng.integers(*_QUALITY))
    buf = io.BytesIO()
    if spec.kind == "png":
        img.putalpha(_field(rng, size, 4, "L"))
        img.save(buf, "PNG", compress_level=1)
    else:
        mode = {"gray": "L", "cmyk": "CMYK"}.get(spec.kind, "RGB")
        img.convert(mode).save(buf, "JPEG", quality=quality, progressive=spec.kind == "progressive")
    return buf.getvalue()


def _make_chunk(job: tuple[Path, int, list[ImageSpec]]) -> tuple[int, int]:
    """Write one chunk of images; return (images, bytes) written."""
    root, seed, specs = job
    written = 0
    for spec in specs:
        written += (root / spec.path).write_bytes(render(spec, seed))
    return len(specs), written


def _chunks(specs: list[ImageSpec], workers: int) -> Iterator[list[ImageSpec]]:
    """Largest images first, in chunks of about equal pixel count (the huge one alone)."""
    specs = sorted(specs, key=lambda s: s.width * s.height, reverse=True)
    budget = sum(s.width * s.height for s in specs) / (workers * 50)
    chunk: list[ImageSpec] = []
    pixels = 0
    for spec in specs:
        chunk.append(spec)
        pixels += spec.width * spec.height
        if pixels >= budget or len(chunk) >= 256:
            yield chunk
            chunk, pixels = [], 0
    if chunk:
        yield chunk


@contextmanager
def _imap(workers: int) -> Iterator[Callable[..., Iterable[Any]]]:
    """An unordered map over `workers` processes (forkserver or spawn, never fork); in-process for 1."""
    if workers == 1:
        yield map
        return
    with safe_context().Pool(workers) as pool:
        yield pool.imap_unordered


def _prepare_root(out: Path, overwrite: bool) -> Path:
    """OUT/256_ObjectCategories, emptied if `overwrite`, refused if it already has content; OUT
    holding anything else is refused either way: `preprocess OUT` would read the stand-in's
    classes instead of it (a user's own class folders would vanish from the dataset)."""
    if out.exists() and not out.is_dir():
        raise OptionError(f"{out} is not a folder: pass a new or empty folder to write the stand-in into")
    others = sorted(p.name for p in out.iterdir() if p.name != ROOT_NAME) if out.is_dir() else []
    if others:
        raise OptionError(f"{out} is not empty (it holds {others[0]!r}{' and more' if len(others) > 1 else ''}): "
                          f"the stand-in's {ROOT_NAME}/ would hide it from `iofeed preprocess`; pass a new or "
                          "empty folder")
    root = out / ROOT_NAME
    if root.is_dir() and any(root.iterdir()):
        if not overwrite:
            raise OptionError(f"{root} already exists and is not empty: pass --overwrite (overwrite=True from Python) "
                              "or remove it")
        shutil.rmtree(root)
    root.mkdir(parents=True, exist_ok=True)
    return root


def synth_caltech256(
    out: Path,
    per_class: int | None = None,
    seed: int = 0,
    workers: int | None = None,
    progress: bool = True,
    overwrite: bool = False,
) -> SynthSummary:
    """Write a Caltech-256-shaped stand-in under OUT/256_ObjectCategories.

    per_class: images per class, with sizes capped at 1200 px so small sets stay fast;
    None: the real set's 30,607 images, per-class counts and one ~7900x7900 image.
    workers: processes to use (default: all cores). Same seed: byte-identical files.
    """
    if per_class is not None and per_class < 1:
        raise OptionError(f"per_class must be at least 1, got {per_class}")
    workers = resolve_workers(workers)
    start = time.perf_counter()
    root = _prepare_root(Path(out), overwrite)
    specs = plan_images(class_counts(per_class), seed, None if per_class is None else _SMALL_SET_MAX_SIDE)
    for folder in sorted({(root / s.path).parent for s in specs}):
        folder.mkdir(parents=True, exist_ok=True)
    (root / CALTECH256_CLASSES[_SPIDER] / "RENAME2").write_text(_RENAME2)
    jobs = [(root, seed, chunk) for chunk in _chunks(specs, workers)]
    images = written = 0
    with progress_bar(total=len(specs), unit="img", desc="synth caltech256", disable=not progress) as bar:
        with _imap(min(workers, len(jobs))) as imap:
            for n, nbytes in imap(_make_chunk, jobs):
                images, written = images + n, written + nbytes
                bar.update(n)
    return SynthSummary(root, images, len(CALTECH256_CLASSES), written, time.perf_counter() - start)
