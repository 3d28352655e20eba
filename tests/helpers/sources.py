"""Inputs of every source kind made by the libraries users make them with (webdataset's TarWriter,
pyarrow, datasets), and an iofeed dataset read back as {source name: (pixels, classes, extra)}."""
from __future__ import annotations

import io
import json
from pathlib import Path

import numpy as np
from PIL import Image

from helpers.images import jpeg_bytes, png_bytes, smooth_rgb
from iofeed.format.manifest import Manifest
from iofeed.format.shards import read_index, read_member
from iofeed.format.table import ENCODINGS, MEMBER_EXTENSIONS, load_sources, load_table


def picture(i: int) -> Image.Image:
    """Sample `i`'s image: small (never resized), distinct."""
    return smooth_rgb(40 + 3 * i, 32 + 2 * i, seed=100 + i)


def encode(img: Image.Image, kind: str) -> bytes:
    """`img` as jpg, png or webp bytes (webp lossless, so pixels compare exactly before re-encoding)."""
    if kind == "jpg":
        return jpeg_bytes(img)
    if kind == "png":
        return png_bytes(img)
    out = io.BytesIO()
    img.save(out, "WEBP", lossless=True)
    return out.getvalue()


def pixels(data: bytes) -> np.ndarray:
    return np.asarray(Image.open(io.BytesIO(data)).convert("RGB"))


def close_to(a: np.ndarray, b: np.ndarray) -> bool:
    """Same shape and within JPEG re-encoding error."""
    return a.shape == b.shape and float(np.abs(a.astype(int) - b.astype(int)).mean()) < 4.0


def write_webdataset(folder: Path, shards: int = 2, per_shard: int = 6) -> dict[str, tuple[np.ndarray, object]]:
    """Shards written by `webdataset.TarWriter` with jpg/png/webp images and cls or json labels,
    plus three bad samples in the last shard (no label, no image, undecodable bytes).
    Returns {"SHARD#KEY": (source pixels, label)} of the good ones."""
    import webdataset as wds

    folder.mkdir(parents=True, exist_ok=True)
    expected = {}
    kinds = ("jpg", "png", "webp")
    for s in range(shards):
        path = folder / f"shard-{s:06d}.tar"
        with wds.TarWriter(str(path)) as sink:
            for k in range(per_shard):
                i = s * per_shard + k
                img, ext = picture(i), kinds[i % 3]
                sample = {"__key__": f"s{i:04d}", ext: encode(img, ext)}
                if i % 2:
                    label = 3 + i % 4  # an index in json, as cls holds: a dataset's labels are all indices or all names
                    sample["json"] = {"label": label, "caption": f"picture {i}"}
                else:
                    sample["cls"] = i % 3
                    label = i % 3
                sink.write(sample)
                expected[f"{path}#s{i:04d}"] = (np.asarray(img), label)
            if s == shards - 1:
                sink.write({"__key__": "nolabel", "jpg": encode(picture(90), "jpg")})
                sink.write({"__key__": "noimage", "cls": 1, "txt": "just words"})
                sink.write({"__key__": "broken", "jpg": encode(picture(91), "jpg")[:200], "cls": 2})
    return expected


def read_dataset(path: Path, split: str | None = None) -> dict[str, tuple[np.ndarray, list[int], object]]:
    """Every sample of every split (or `split`): {source name: (pixels, class indices, extra)}."""
    manifest = Manifest.read(path)
    found = {}
    for name, info in manifest.splits.items():
        if split is not None and name != split:
            continue
        table = load_table(path / info.table)
        sources = load_sources(path / info.table)
        side = manifest.targets.get("files", {}).get(name)
        rows = [json.loads(line) for line in (path / side).read_text().splitlines()] if side else None
        for k, (row, source) in enumerate(zip(table, sources, strict=True)):
            shard = path / info.shards[row["shard"]]["name"]
            data = read_member(shard, int(row["offset"]), int(row["size"]))
            if ENCODINGS[row["encoding"]] == "raw":
                image = np.frombuffer(data, np.uint8).reshape(int(row["height"]), int(row["width"]), 3)
            else:
                image = pixels(data)
            classes, extra = rows[k] if rows else ([int(row["label"])], None)
            found[source] = (image, classes, extra)
    return found


def index_members(path: Path) -> list[set[str]]:
    """The member extensions of every sample of a dataset, from its shard indexes."""
    manifest = Manifest.read(path)
    return [set(entry.members) for info in manifest.splits.values() for s in info.shards
            for entry in read_index(path / s["index"])]


__all__ = ["MEMBER_EXTENSIONS", "close_to", "encode", "picture", "pixels", "read_dataset", "write_webdataset",
           "index_members"]
