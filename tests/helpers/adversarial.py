"""Adversarial sources: every image's pixels encode its label and its sample number
(`pixelcode.py`), for every source kind (class folders, WebDataset tars, Parquet, Hugging Face
`save_to_disk`, labels files), each clean or damaged the ways users' data is (truncation, bad tar
headers, duplicate members, two images in one sample, odd labels, changes in place after `index`,
FIFOs). Each `Source` says what must come out: the class name each kept sample arrives with, which
samples must be rejected (or refused by a named error), and which outcome a damage allows.
"""
from __future__ import annotations

import io
import json
import os
import tarfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
from PIL import Image

from helpers.adversarial_captions import captions
from helpers.adversarial_targets import TARGET_BUILDERS
from helpers.pixelcode import Item, Source, code_of, coded_jpeg, coded_pixels, int_items, jpeg_of

# ------------------------------------------------------------------ WebDataset tars


def write_tar(path: Path, members: list[tuple[str, bytes]]) -> None:
    """A ustar tar of `members` (name, data) in order, as `tarfile` writes it."""
    with tarfile.open(path, "w", format=tarfile.USTAR_FORMAT) as tar:
        for name, data in members:
            info = tarfile.TarInfo(name)
            info.size, info.mtime, info.mode = len(data), 0, 0o644
            tar.addfile(info, io.BytesIO(data))


def wds_members(items: list[Item], names: list[str], ext: str = "cls") -> list[tuple[str, bytes]]:
    return [m for item in items for m in ((f"s{item.sample:04d}.jpg", jpeg_of(names, item)),
                                          (f"s{item.sample:04d}.{ext}", str(item.label).encode()))]


TXT_DAMAGES = ("plus_labels", "short_captions")
SHORT_CAPTIONS = [f"{colour} {thing}" for colour in ("Red", "Blue", "Green", "Old", "Tiny", "Wet")
                  for thing in ("Sports Car", "Kite", "Barn", "Teapot")]


def member_span(path: Path, name: str) -> tuple[int, int]:
    """(header offset, data offset) of the first member `name` of the tar at `path`."""
    with tarfile.open(path, "r:") as tar:
        info = next(i for i in tar if i.name == name)
        return info.offset, info.offset_data


def webdataset(root: Path, damage: str) -> Source:
    """Three shards of 8 samples with `cls` labels 0..2 (`odd_labels`: 0..10 and a -1; `huge_label`:
    one 5,000,000; `plus_labels`: `txt` members `+0`..`+10`, class indices 0..10 as in a `cls`),
    damaged as `damage` says. A damaged shard may be refused by name (the run
    fails naming it) or rejected with the samples it held; nothing may go without a word."""
    refusal = None
    folder = root / "wds"
    folder.mkdir(parents=True)
    items, names = int_items(24), []
    if damage == "odd_labels":
        items = [Item(i, i % 11, str(i % 11)) for i in range(23)] + [Item(23, -1, None)]
        refusal = r"s0023.*-1|-1.*s0023"  # the sample rejected, or the run refused, naming it and its value
    if damage == "huge_label":
        items[5] = Item(5, 5_000_000, None)
    if damage == "plus_labels":  # sorted as text, +10 once became class 2 and +2 class 3
        items = [Item(i, f"+{i % 11}", str(i % 11)) for i in range(24)]
    if damage == "short_captions":  # img2dataset's jpg + txt + json, short unique captions: a class each
        items = [Item(i, SHORT_CAPTIONS[i], SHORT_CAPTIONS[i]) for i in range(24)]
    source = Source("webdataset", damage, str(folder / "shard-{000000..000002}.tar"), items, names,
                    refusal=refusal if damage == "odd_labels" else None)
    for s in range(3):
        shard = folder / f"shard-{s:06d}.tar"
        members = wds_members(items[8 * s: 8 * s + 8], names, "txt" if damage in TXT_DAMAGES else "cls")
        if damage == "short_captions":
            members += [(f"s{i.sample:04d}.json", json.dumps({"caption": i.label}).encode())
                        for i in items[8 * s: 8 * s + 8]]
            members.sort(key=lambda m: m[0].split(".")[0])
        if s == 1 and damage == "duplicate_member":  # a second picture after s0009's label, and s0008 again at the end
            members.insert(4, ("s0009.jpg", coded_jpeg(code_of(names, "0"), 9)))
            members.append(("s0008.jpg", coded_jpeg(code_of(names, "1"), 8)))
            items[9].expect = items[8].expect = None
        if s == 1 and damage == "two_images":  # a mask-like png before s0010's jpg
            members.insert(4, ("s0010.png", _png(coded_pixels(code_of(names, "2"), 10))))
            items[10].expect = None
        write_tar(shard, members)
        source.shards.append(shard)
    middle = source.shards[1]
    if damage in ("truncated", "truncated_mid"):  # cut before the fourth sample (where tarfile sees a clean
        header, data = member_span(middle, "s0011.jpg")  # end), or inside its image: the rest is lost unless named
        os.truncate(middle, header if damage == "truncated" else data + 100)
        source.lenient = {i.sample for i in items[8:16]}
        source.refusal = r"shard-000001\.tar"
    if damage == "bad_header":  # one header's checksum broken mid-shard
        header, _ = member_span(middle, "s0012.jpg")
        with open(middle, "r+b") as f:
            f.seek(header + 148)
            f.write(b"0000000\x00")
        source.lenient = {i.sample for i in items[8:16]}
        source.refusal = r"shard-000001\.tar"
    if damage == "fifo":  # a FIFO named like a shard of the list
        os.mkfifo(folder / "shard-000003.tar")
        source.spec = str(folder / "shard-{000000..000003}.tar")
        source.refusal = r"shard-000003\.tar"
        source.strays = {"shard-000003.tar"}
    if damage == "huge_label":
        source.refusal = r"5000000"
    if damage == "short_captions":  # kept as classes (they may be few-shot names), and the summary says so
        source.says = r"24 of 24 classes in .* have one sample .*--label-column json.*--label-names"
    return source


def _png(pixels: np.ndarray) -> bytes:
    out = io.BytesIO()
    Image.fromarray(pixels).save(out, "PNG")
    return out.getvalue()


def rotate_members(shard: Path) -> str:
    """Rewrite `shard` with its samples rotated by one (the first moved to the end): same size,
    same members, every offset of its index now another sample's. Returns the expected error."""
    with tarfile.open(shard, "r:") as tar:
        members = [(info.name, tar.extractfile(info).read()) for info in tar if info.isfile()]
    size = shard.stat().st_size
    write_tar(shard, members[2:] + members[:2])
    assert shard.stat().st_size == size
    return rf"{shard.name}.*(replaced|rewritten|changed)"


def relabel_in_place(shard: Path) -> str:
    """Change the first `cls` member's digit in place (same size). Returns the expected error."""
    with tarfile.open(shard, "r:") as tar:
        info = next(i for i in tar if i.name.endswith(".cls"))
        value = tar.extractfile(info).read()
    with open(shard, "r+b") as f:
        f.seek(info.offset_data)
        f.write(b"1" if value != b"1" else b"2")
    return rf"{shard.name}.*(replaced|rewritten|changed)"


def sibling_in_place(shard: Path) -> str:
    """Replace `shard` by a symlink to a sibling shard of the same size."""
    sibling = next(p for p in sorted(shard.parent.glob("*.tar")) if p != shard and not p.is_symlink()
                   and p.stat().st_size == shard.stat().st_size)
    shard.unlink()
    shard.symlink_to(sibling.name)
    return rf"{shard.name}.*(replaced|rewritten|changed)"


# ------------------------------------------------------------------ folders and labels files


def folder(root: Path, damage: str, count: int = 24) -> Source:
    """Class folders `c0`..`c2` of `count` images in all; `truncated` adds a cut JPEG, `fifo` a FIFO."""
    src = root / "folder"
    items, names = int_items(count), []
    for item in items:
        item.expect = f"c{item.label}"
        path = src / item.expect / f"{item.sample:04d}.jpg"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(jpeg_of(names, item))
    source = Source("folder", damage, str(src), items, names)
    if damage == "truncated":
        data = coded_jpeg(0, count)
        (src / "c0" / f"{count:04d}.jpg").write_bytes(data[: len(data) // 2])
        items.append(Item(count, 0, None))
    if damage == "fifo":
        os.mkfifo(src / "c1" / f"{count:04d}.jpg")
        items.append(Item(count, 1, None))
    return source


def labels_file(root: Path, damage: str, form: str = "csv") -> Source:
    """A flat folder of images and a labels file (`form`: csv or jsonl) with a `note` column (each
    sample's extra, so the dataset has a targets file). Damages: `truncated` image, `float_labels`
    (0.0, 1.0, 2.0: classes "0".."2"), `odd_labels` (0..10 and a -1), `plus_labels` (`+0`..`+10`:
    class indices), `nan_inf` (integer labels with `nan`, `NaN`, `inf` rows: those rejected, never
    the run), `spellings` (`1`, `1.0`, `+1`, `01` with --label-names: four classes as written), `bom`
    (the file starts with a UTF-8 byte-order mark, as Excel writes it; a CSV then without header),
    `fifo` (the targets file a FIFO after preprocessing: the loader must refuse it, not wait)."""
    src, items, names = root / "images", int_items(24), []
    src.mkdir(parents=True)
    if damage == "float_labels":
        for item in items:
            item.label = float(item.label)
    if damage == "odd_labels":
        items = [Item(i, i % 11, str(i % 11)) for i in range(23)] + [Item(23, -1, None)]
    if damage == "plus_labels":
        items = [Item(i, f"+{i % 11}", str(i % 11)) for i in range(24)]
    if damage == "nan_inf":  # docs: NaN is "no label", inf "not a class", each for its own row
        odd = {5: "nan", 11: "NaN", 17: "inf"}
        items = [Item(i, odd[i], None) if i in odd else Item(i, i % 3, str(i % 3)) for i in range(24)]
    if damage == "spellings":  # --label-names: each label a class name as written, none folded
        spelled = ["1", "1.0", "+1", "01"]
        items = [Item(i, spelled[i % 4], spelled[i % 4]) for i in range(24)]
    for item in items:
        (src / f"{item.sample:04d}.jpg").write_bytes(jpeg_of(names, item))
    if damage == "truncated":
        data = coded_jpeg(0, 24)
        (src / "0024.jpg").write_bytes(data[: len(data) // 2])
        items.append(Item(24, 0, None))
    rows = [{"path": f"{i.sample:04d}.jpg", "label": i.label, "note": f"n{i.sample}"} for i in items]
    labels = root / f"labels.{form}"
    header = "" if damage == "bom" else "path,label,note\n"  # a BOM glued to the first path of a headerless CSV
    if form == "csv":
        text = header + "".join(f"{r['path']},{r['label']},{r['note']}\n" for r in rows)
    else:
        text = "".join(json.dumps(r) + "\n" for r in rows)
    labels.write_bytes((b"\xef\xbb\xbf" if damage == "bom" else b"") + text.encode())
    source = Source(f"labels-{form}", damage, str(src), items, names, options={"labels": labels})
    if damage == "spellings":
        source.options["label_names"] = True
    if damage == "odd_labels":  # the row rejected, or the run refused, naming the file or image and the value
        source.refusal = rf"(labels\.{form}|0023\.jpg).*-1|-1.*(labels\.{form}|0023\.jpg)"
    if damage == "fifo":
        source.after = _fifo_targets
    return source


def _fifo_targets(dataset: Path) -> str:
    target = dataset / "train-targets.jsonl"
    target.unlink()
    os.mkfifo(target)
    return r"train-targets\.jsonl is not a regular file \(a FIFO\)"


# ------------------------------------------------------------------ Parquet and Hugging Face


def parquet(root: Path, damage: str) -> Source:
    """One Parquet file: `image` bytes and an int64 `label` (`float_labels`: float64 0.0..2.0 with a
    NaN row, as pandas makes of an int column with one missing value); `truncated`: a cut image;
    `cut_file`, `bad_footer`: the file itself damaged, refused in one line naming it."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    items, names = int_items(24), []
    images = [jpeg_of(names, item) for item in items]
    labels: list[Any] = [item.label for item in items]
    if damage == "truncated":
        images.append(coded_jpeg(0, 24)[:300])
        labels.append(0)
        items.append(Item(24, 0, None))
    kind = pa.int64()
    if damage == "float_labels":
        labels = [float(v) for v in labels] + [float("nan")]
        images.append(coded_jpeg(0, 25))
        items.append(Item(25, float("nan"), None))
        kind = pa.float64()
    path = root / "train.parquet"
    pq.write_table(pa.table({"image": pa.array(images, pa.binary()), "label": pa.array(labels, kind)}), path,
                   row_group_size=10)
    source = Source("parquet", damage, str(path), items, names, options={"label_column": "label"})
    if damage in ("cut_file", "bad_footer"):  # the file cut in half (its footer gone), or its footer's length wrong
        data = bytearray(path.read_bytes())
        if damage == "cut_file":
            data = data[: len(data) // 2]
        else:
            data[-8:-4] = (100).to_bytes(4, "little")
        path.write_bytes(bytes(data))
        source.refusal = r"^iofeed: error: cannot read Parquet file .*train\.parquet: .*write it again"
    return source


def hf(root: Path, damage: str) -> Source:
    """A `datasets.Dataset.save_to_disk` folder: an `Image` column and a `ClassLabel` (names kept);
    `truncated`: a cut image."""
    import datasets

    class_names = ["ant", "bee", "cat"]
    items, names = int_items(24), []
    for item in items:
        item.expect = class_names[item.label]
    images = [{"bytes": jpeg_of(names, item), "path": None} for item in items]
    if damage == "truncated":
        images.append({"bytes": coded_jpeg(0, 24)[:300], "path": None})
        items.append(Item(24, 0, None))
    features = datasets.Features({"image": datasets.Image(), "label": datasets.ClassLabel(names=class_names)})
    table = datasets.Dataset.from_dict({"image": images, "label": [i.label for i in items]}, features=features)
    table.save_to_disk(str(root / "hf"))
    return Source("hf", damage, str(root / "hf"), items, names)


BUILDERS: dict[str, Callable[[Path, str], Source]] = {
    "folder": folder, "webdataset": webdataset, "parquet": parquet, "hf": hf,
    "labels-csv": lambda root, damage: labels_file(root, damage, "csv"),
    "labels-jsonl": lambda root, damage: labels_file(root, damage, "jsonl"),
    "captions": captions,
    **TARGET_BUILDERS,  # type: ignore[dict-item]  # detection sources: their own checks (test_detection_sources)
}


def build(kind: str, damage: str, root: Path, **options: Any) -> Source:
    """The source `kind` damaged as `damage`, written under `root` (`options`: the builder's own)."""
    root.mkdir(parents=True, exist_ok=True)
    return BUILDERS[kind](root, damage, **options)
