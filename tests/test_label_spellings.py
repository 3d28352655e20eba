"""One rule per label spelling, the same for every source (docs/formats.md, "Labels"): a label
written as text (`+3`, `03`, `3.0`, `3e0`, `nan`, `inf`, `true`, empty) means the same in a CSV
cell, a plain labels line, a JSON string, a WebDataset `cls`, `txt` or json `label`, a Parquet or
`save_to_disk` string column, through `preprocess` and `index`; with `--label-names` each is the
class name as written. A class folder's name is always a name.

Each source holds two samples each of the labels `0`, `1`, `2` (written plainly) and one sample
`odd` with the spelling under test; the scan (what preprocess and index store) must give `odd`
the class the rule says, or reject it with the rule's reason, and leave the others alone."""
from __future__ import annotations

import io
import json
import re
import tarfile
from pathlib import Path

import pytest

from helpers.images import jpeg_bytes, smooth_rgb
from iofeed.prepare.index import index_shards
from iofeed.prepare.sources.base import SourceOptions
from iofeed.prepare.sources.kinds import scan_source

SPELLINGS = ["+3", "03", "3.0", "3e0", "nan", "inf", "true", ""]
BASE = ["0", "1", "2", "0", "1", "2"]
NO_LABEL = "no label"
NOT_INTEGER = "label not a class (inf is not an integer class index"
BOOLEAN = "label not a class (true is a boolean"
# without --label-names: what `odd` becomes, a class name or the start of its rejection reason
AS_INDEX = {"+3": "3", "03": "3", "3.0": "3", "3e0": "3", "nan": NO_LABEL, "inf": NOT_INTEGER, "true": BOOLEAN,
            "": NO_LABEL}
AS_NAME = {**{s: s for s in SPELLINGS}, "nan": NO_LABEL, "": NO_LABEL}  # --label-names: as written
KINDS = ["labels-csv", "labels-plain", "labels-jsonl", "wds-cls", "wds-txt", "wds-json", "parquet", "hf"]


def _jpeg(i: int) -> bytes:
    return jpeg_bytes(smooth_rgb(24, 20, seed=i))


def _samples(odd: str) -> list[tuple[str, str]]:
    return [(f"s{i}", label) for i, label in enumerate(BASE)] + [("odd", odd)]


def _tar(path: Path, members: list[tuple[str, bytes]]) -> Path:
    with tarfile.open(path, "w") as tar:
        for name, data in members:
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return path


def write_source(kind: str, odd: str, root: Path) -> tuple[str, SourceOptions, str]:
    """The source `kind` holding `_samples(odd)`: (spec, options, the odd sample's name in it)."""
    samples = _samples(odd)
    root.mkdir(parents=True)
    if kind.startswith("labels"):
        for i, (key, _) in enumerate(samples):
            (root / f"{key}.jpg").write_bytes(_jpeg(i))
        if kind == "labels-csv":
            text = "path,label\n" + "".join(f"{key}.jpg,{label}\n" for key, label in samples)
        elif kind == "labels-plain":
            text = "".join(f"{key}.jpg {label}\n" for key, label in samples)
        else:
            text = "".join(json.dumps({"path": f"{key}.jpg", "label": label}) + "\n" for key, label in samples)
        labels = root.parent / f"labels.{kind}"
        labels.write_text(text)
        return str(root), SourceOptions(labels=labels), "odd.jpg"
    if kind.startswith("wds"):
        ext = kind[4:]
        members = []
        for i, (key, label) in enumerate(samples):
            data = json.dumps({"label": label}) if ext == "json" else label
            members += [(f"{key}.jpg", _jpeg(i)), (f"{key}.{ext}", data.encode())]
        shard = _tar(root / "shard-000000.tar", members)
        return str(shard), SourceOptions(), f"{shard}#odd"
    images = [_jpeg(i) for i in range(len(samples))]
    labels = [label for _, label in samples]
    if kind == "parquet":
        import pyarrow as pa
        import pyarrow.parquet as pq

        path = root / "t.parquet"
        pq.write_table(pa.table({"image": pa.array(images, pa.binary()), "label": pa.array(labels, pa.string())}),
                       path)
        return str(path), SourceOptions(spool=root / "spool"), f"{path}#{len(samples) - 1}"
    import datasets

    features = datasets.Features({"image": datasets.Image(), "label": datasets.Value("string")})
    table = datasets.Dataset.from_dict({"image": [{"bytes": b, "path": None} for b in images], "label": labels},
                                       features=features)
    table.save_to_disk(str(root / "hf"))
    return str(root / "hf"), SourceOptions(spool=root / "spool"), "#6"


def outcome(kind: str, odd: str, root: Path, label_names: bool) -> tuple[list[str], dict[str, str], str]:
    """(classes, {plain sample: its class}, what became of `odd`: its class or its rejection)."""
    spec, options, odd_name = write_source(kind, odd, root)
    options = SourceOptions(**{**options.__dict__, "label_names": label_names})
    scanned = scan_source(spec, options)
    resolved = scanned.targets.resolve()
    classes = {name: resolved.names[resolved.label(i)] for i, name in enumerate(scanned.names)}
    found = [c for name, c in classes.items() if name.endswith(odd_name)]
    reasons = [r.reason for r in scanned.rejected if r.path.endswith(odd_name)]
    assert len(found) + len(reasons) == 1, (found, reasons)
    plain = {name: c for name, c in classes.items() if not name.endswith(odd_name)}
    return resolved.names, plain, found[0] if found else reasons[0]


def _case(kind: str, odd: str) -> object:
    # no dependency marker: without pyarrow or datasets these cases fail by name, never skip into green
    return pytest.param(kind, odd, id=f"{kind}-{odd or 'empty'}")


CASES = [_case(kind, odd) for kind in KINDS for odd in SPELLINGS if not (kind == "labels-plain" and odd == "")]


@pytest.mark.parametrize("label_names", [False, True], ids=["rule", "label-names"])
@pytest.mark.parametrize("kind, odd", CASES)
def test_a_label_spelling_means_the_same_in_every_source(kind, odd, label_names, tmp_path):
    classes, plain, became = outcome(kind, odd, tmp_path / "src", label_names)
    expected = (AS_NAME if label_names else AS_INDEX)[odd]
    by_number = {int(re.search(r"(\d+)(\.jpg)?$", name).group(1)): c for name, c in plain.items()}
    assert by_number == dict(enumerate(BASE)), plain  # the plainly written labels never renumbered
    if expected in (NO_LABEL, NOT_INTEGER, BOOLEAN):
        assert became.startswith(expected), became
        assert classes == ["0", "1", "2"]
    else:
        assert became == expected
        assert set(classes) == {"0", "1", "2", expected} and classes == (sorted(classes) if label_names else
                                                                         [str(i) for i in range(len(classes))])


@pytest.mark.parametrize("odd", ["+3", "03", "3.0", "true", "inf"])
def test_index_reads_a_spelling_as_preprocess_does(odd, tmp_path):
    spec, _, _ = write_source("wds-txt", odd, tmp_path / "src")
    for label_names in (False, True):
        out = tmp_path / f"ix-{label_names}.iof"
        index_shards(spec, out, label_names=label_names)
        scanned = outcome("wds-txt", odd, tmp_path / f"scan-{label_names}", label_names)
        assert json.loads((out / "iofeed.json").read_text())["classes"] == scanned[0]


@pytest.mark.parametrize("odd", ["+3", "03", "nan", "inf", "true"])
def test_a_class_folder_name_is_always_a_name(odd, tmp_path):
    """The exception the docs state: a folder's name is the class name as it is (ImageFolder's
    rule), whatever it spells; `nan` is a name there too."""
    for i, label in enumerate(["0", "1", odd]):
        (tmp_path / "src" / label).mkdir(parents=True)
        (tmp_path / "src" / label / f"{i}.jpg").write_bytes(_jpeg(i))
    scanned = scan_source(str(tmp_path / "src"), SourceOptions())
    assert scanned.targets.resolve().names == sorted(["0", "1", odd])


def test_label_names_keeps_three_spellings_of_one_three_classes(tmp_path):
    """Item 4 of issue 39: `1`, `1.0` and `+1` with --label-names were two classes (4 and 8)."""
    root = tmp_path / "src"
    root.mkdir()
    cells = ["1", "1.0", "+1"] * 4
    for i in range(len(cells)):
        (root / f"{i}.jpg").write_bytes(_jpeg(i))
    labels = tmp_path / "labels.csv"
    labels.write_text("path,label\n" + "".join(f"{i}.jpg,{cell}\n" for i, cell in enumerate(cells)))
    scanned = scan_source(str(root), SourceOptions(labels=labels, label_names=True))
    resolved = scanned.targets.resolve()
    assert resolved.names == ["+1", "1", "1.0"]
    assert [resolved.names[resolved.label(i)] for i in range(len(cells))] == [cells[int(Path(n).stem)]
                                                                             for n in scanned.names]
