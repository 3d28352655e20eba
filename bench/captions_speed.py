"""Image-text epoch speed against image-only, in the same run (issue 41's target: >= 95%).

Writes img2dataset-style shards (`000000000.jpg` + `.txt` + `.json`, `_stats.json` beside), makes
one dataset of them with `iofeed preprocess --target text`, then reads it with the same recipe
as image-only (`iofeed.loader(X)`), with captions (`Output(target="text")`) and with captions
tokenized in the workers (`Output(target="text", tokenizer=...)`), in alternating windows of
`--seconds` each after a warm-up, and prints each rate and its ratio to image-only:

    PYTHONPATH=src .venv/bin/python bench/captions_speed.py --images 2000 --seconds 10 --rounds 2
"""
from __future__ import annotations

import argparse
import io
import json
import sys
import tarfile
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
from PIL import Image

import iofeed
from iofeed.prepare.run import preprocess

sys.path.insert(0, str(Path(__file__).parent))  # the tokenizer's module, importable by the workers too
from caption_tokenizers import utf8_ids  # noqa: E402

WORDS = ("a", "the", "red", "small", "dog", "cat", "running", "on", "beach", "city", "at", "night", "photo", "of",
         "old", "house", "with", "blue", "sky", "people", "walking", "street", "two", "children", "playing")


def write_shards(folder: Path, images: int, per_shard: int = 500, seed: int = 0) -> str:
    """img2dataset's layout: 320x240..480x360 JPEGs (smooth shapes and noise), captions of 6-20 words."""
    rng = np.random.default_rng(seed)
    folder.mkdir(parents=True, exist_ok=True)
    shards = (images + per_shard - 1) // per_shard
    for s in range(shards):
        with tarfile.open(folder / f"{s:05d}.tar", "w") as tar:
            for i in range(s * per_shard, min(images, (s + 1) * per_shard)):
                w, h = int(rng.integers(320, 481)), int(rng.integers(240, 361))
                yy, xx = np.mgrid[0:h, 0:w]
                base = (np.sin(xx / rng.uniform(8, 40)) + np.cos(yy / rng.uniform(8, 40))) * 60 + 128
                pixels = np.clip(base[..., None] * rng.uniform(0.5, 1.0, 3) + rng.normal(0, 12, (h, w, 3)), 0, 255)
                jpeg = io.BytesIO()
                Image.fromarray(pixels.astype(np.uint8)).save(jpeg, "JPEG", quality=90)
                caption = " ".join(rng.choice(WORDS, int(rng.integers(6, 21))))
                key = f"{s:05d}{i % per_shard:04d}"
                meta = {"key": key, "url": f"https://example.com/{i}.jpg", "caption": caption, "width": w,
                        "height": h, "status": "success"}
                members = (("jpg", jpeg.getvalue()), ("txt", caption.encode()), ("json", json.dumps(meta).encode()))
                for ext, data in members:
                    info = tarfile.TarInfo(f"{key}.{ext}")
                    info.size = len(data)
                    tar.addfile(info, io.BytesIO(data))
        (folder / f"{s:05d}_stats.json").write_text(json.dumps({"count": per_shard}))
    return str(folder / f"{{00000..{shards - 1:05d}}}.tar")


def stream(loader: Any) -> Iterator[int]:
    """Images per batch, epoch after epoch."""
    for batch in loader.repeat():
        yield len(batch[0])


def window(batches: Iterator[int], seconds: float, loader: Any) -> tuple[float, float, float]:
    """(img/s, main-process CPU ms per image, worker CPU ms per image) over `seconds` of `batches`."""
    start, cpu, workers, images = time.perf_counter(), time.process_time(), loader.stats.worker_cpu_seconds, 0
    while time.perf_counter() - start < seconds:
        images += next(batches)
    return (images / (time.perf_counter() - start), 1e3 * (time.process_time() - cpu) / images,
            1e3 * (loader.stats.worker_cpu_seconds - workers) / images)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--images", type=int, default=2000)
    parser.add_argument("--seconds", type=float, default=10.0, help="each timed window (after a warm-up window)")
    parser.add_argument("--warmup", type=float, default=5.0)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--image-size", type=int, default=224)
    parser.add_argument("--dir", type=Path, default=None, help="keep the shards and dataset here (default: a temp dir)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as scratch:
        root = args.dir or Path(scratch)
        dataset = root / "captions.iof"
        if not (dataset / "iofeed.json").exists():
            spec = write_shards(root / "shards", args.images)
            preprocess(spec, dataset, workers=args.workers, progress=False, val_fraction=0, target="text",
                       overwrite=True)
        common = {"batch_size": args.batch_size, "image_size": args.image_size, "workers": args.workers,
                  "shuffle": True}
        feeds = {"image-only": iofeed.Output(),
                 "captions": iofeed.Output(target="text"),
                 "captions+tokenizer": iofeed.Output(target="text", tokenizer=utf8_ids)}
        loaders = {name: iofeed.loader(dataset, output=output, **common) for name, output in feeds.items()}
        streams = {name: stream(ld) for name, ld in loaders.items()}
        rates: dict[str, list[float]] = {name: [] for name in feeds}
        cpu: dict[str, list[tuple[float, float]]] = {name: [] for name in feeds}
        for name in feeds:
            window(streams[name], args.warmup, loaders[name])
        names = list(feeds)
        for r in range(args.rounds):  # each round in another order: a load that drifts hits every feed alike
            for name in names[r % len(names):] + names[:r % len(names)]:
                rate, main_ms, worker_ms = window(streams[name], args.seconds, loaders[name])
                rates[name].append(rate)
                cpu[name].append((main_ms, worker_ms))
        for ld in loaders.values():
            ld.close()
    base = sum(rates["image-only"]) / len(rates["image-only"])
    for name, found in rates.items():
        mean = sum(found) / len(found)
        paired = np.median([r / b for r, b in zip(found, rates["image-only"])])  # round by round
        print(f"{name:20s} {mean:8.1f} img/s  windows {', '.join(f'{r:.1f}' for r in found)}  "
              f"ratio to image-only {mean / base:.3f} (median of rounds {paired:.3f}); CPU ms/img main "
              f"{np.mean([c[0] for c in cpu[name]]):.3f}, workers {np.mean([c[1] for c in cpu[name]]):.3f}")


if __name__ == "__main__":
    main()
