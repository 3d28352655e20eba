"""Labels as every source writes them (Parquet and CSV floats, booleans, structs, WebDataset `cls`
written oddly, huge integers, one bad value among good ones) keep their meaning or are rejected by
name: each image's pixels encode its label, so a renumbering or a lost label shows end to end."""
from __future__ import annotations

import io
import json
import tarfile
from decimal import Decimal
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

import iofeed
from helpers.images import jpeg_bytes, make_colour_tree
from helpers.sources import read_dataset
from iofeed.cli.main import main
from iofeed.errors import DatasetError, OptionError, SourceError
from iofeed.format.manifest import MANIFEST_NAME, Manifest
from iofeed.prepare.index import index_shards
from iofeed.prepare.run import preprocess
from iofeed.prepare.sources.label_targets import Targets


def coded(label: int, i: int = 0) -> bytes:
    """A small JPEG whose flat colour encodes `label` (0..11): red = 20 + 20 * label."""
    pixels = np.full((24 + i % 5, 32, 3), (20 + 20 * label, 128, 60), np.uint8)
    return jpeg_bytes(Image.fromarray(pixels))


def decoded(image: np.ndarray) -> int:
    """The label an image's pixels encode (`coded`)."""
    return round((float(np.asarray(image)[..., 0].mean()) - 20) / 20)


def rejected(out: Path) -> dict[str, str]:
    return {r["path"]: r["reason"] for r in map(json.loads, (out / "rejected.jsonl").read_text().splitlines())}


def assert_labels_match_pixels(out: Path) -> int:
    """Every stored sample's class name is the integer its pixels encode, in the tables and from the
    loader; returns the number of samples."""
    manifest = Manifest.read(out)
    stored = read_dataset(out)
    for name, (image, classes, _) in stored.items():
        assert [int(manifest.classes[c]) for c in classes] == [decoded(image)], name
    with iofeed.loader(str(out), batch_size=2, image_size=16, workers=1, drop_last=False) as ld:
        for images, labels in ld:
            assert [int(manifest.classes[label]) for label in labels] == [decoded(img) for img in images]
    return len(stored)


def write_shard(path: Path, samples: list[tuple[str, bytes, dict[str, bytes]]]) -> Path:
    """A tar shard of (key, jpg bytes, {label member extension: bytes})."""
    with tarfile.open(path, "w") as tar:
        for key, image, members in samples:
            for ext, data in (("jpg", image), *members.items()):
                info = tarfile.TarInfo(f"{key}.{ext}")
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
    return path


def parquet(path: Path, labels: list, kind=None) -> Path:
    import pyarrow as pa
    import pyarrow.parquet as pq

    images = [coded(int(v) if isinstance(v, (int, float, Decimal)) and v == v else 0, i) for i, v in enumerate(labels)]
    pq.write_table(pa.table({"image": pa.array(images, pa.binary()), "label": pa.array(labels, kind)}), path)
    return path


@pytest.mark.pyarrow
@pytest.mark.parametrize("with_nan", [True, False])
def test_a_float_parquet_label_column_keeps_its_integer_classes(tmp_path, with_nan):
    # pandas makes float64 of an int column with a NaN: 0.0 is class 0, never a lost label
    labels = [float(i % 4) for i in range(12)] + ([float("nan")] if with_nan else [])
    src = parquet(tmp_path / "t.parquet", labels)
    out = preprocess(src, tmp_path / "out.iof", progress=False, workers=1, val_fraction=0).out
    assert Manifest.read(out).classes == ["0", "1", "2", "3"]
    assert assert_labels_match_pixels(out) == 12
    assert rejected(out) == ({f"{src}#12": "no label (column 'label' is nan)"} if with_nan else {})


@pytest.mark.pyarrow
def test_a_pandas_frame_with_a_missing_label_keeps_the_others(tmp_path):
    pd = pytest.importorskip("pandas")
    frame = pd.DataFrame({"image": [coded(i % 3, i) for i in range(7)], "label": [0, 1, 2, 0, 1, 2, None]})
    assert frame["label"].dtype == np.float64
    frame.to_parquet(tmp_path / "t.parquet")
    out = preprocess(tmp_path / "t.parquet", tmp_path / "out.iof", progress=False, workers=1, val_fraction=0).out
    assert assert_labels_match_pixels(out) == 6 and len(rejected(out)) == 1


@pytest.mark.pyarrow
@pytest.mark.parametrize("labels, message", [
    ([True, False, True], r"label not a class 3; e\.g\. .*t\.parquet#0: label not a class \(true is a boolean"),
    ([{"a": 1}, {"a": 2}], r"label not a class \(\{\"a\": 1\}: the label must be a class index or name\)"),
    ([0.5, 1.5], r"label not a class \(0\.5 is not an integer class index\)"),
])
def test_bool_struct_and_fractional_label_columns_are_refused_in_one_line(tmp_path, labels, message):
    src = parquet(tmp_path / "t.parquet", labels)
    with pytest.raises(SourceError, match=message) as caught:
        preprocess(src, tmp_path / "out.iof", progress=False, workers=1)
    assert "\n" not in str(caught.value) and not (tmp_path / "out.iof").exists()


def labelled_folder(root: Path, labels: list[str]) -> Path:
    """A folder of coded images `i.jpg` (its pixels: the integer `labels[i]` names, else 0) and
    `labels.csv` listing them with those label cells."""
    (root / "img").mkdir(parents=True)
    for i, cell in enumerate(labels):
        try:
            value = int(float(cell))
        except ValueError:
            value = 0
        (root / "img" / f"{i}.jpg").write_bytes(coded(value, i))
    rows = [f'{i}.jpg,"{cell.replace(chr(34), chr(34) * 2)}"' for i, cell in enumerate(labels)]
    (root / "labels.csv").write_text("path,label\n" + "\n".join(rows) + "\n")
    return root


def test_csv_float_labels_are_their_integer_classes(tmp_path):
    root = labelled_folder(tmp_path, ["0.0", "1.0", "2.0", "1.0", "0.0", "2.0"])
    out = preprocess(root / "img", tmp_path / "out.iof", labels=root / "labels.csv", progress=False, workers=1,
                     val_fraction=0).out
    assert Manifest.read(out).classes == ["0", "1", "2"] and assert_labels_match_pixels(out) == 6


def test_csv_true_false_labels_are_refused_naming_a_row(tmp_path):
    root = labelled_folder(tmp_path, ["true", "false", "true"])
    with pytest.raises(SourceError, match=r"0\.jpg: label not a class \(true is a boolean.*labels\.csv line 2\)"):
        preprocess(root / "img", tmp_path / "out.iof", labels=root / "labels.csv", progress=False, workers=1)


def test_one_non_class_label_among_integers_rejects_that_row_by_name(tmp_path):
    # each of these once wrote a dataset the loader then refused whole
    cells = ["0", "1", "2", "3", "1.5", "true", '{"a": 1}', "NaN", "2.0", "1", "0"]
    root = labelled_folder(tmp_path, cells)
    (root / "labels.csv").write_text((root / "labels.csv").read_text().replace('"NaN"', ""))  # an empty cell
    out = preprocess(root / "img", tmp_path / "out.iof", labels=root / "labels.csv", progress=False, workers=1,
                     val_fraction=0).out
    assert Manifest.read(out).classes == ["0", "1", "2", "3"]
    assert assert_labels_match_pixels(out) == 7
    assert rejected(out) == {
        "4.jpg": "label not a class (1.5 is not an integer class index; labels.csv line 6)",
        "5.jpg": "label not a class (true is a boolean: write the classes as 0/1 or as names, or pass --label-names; "
                 "labels.csv line 7)",
        "6.jpg": 'label not a class ({"a": 1}: other samples have classes; labels.csv line 8)',
        "7.jpg": "no label (empty in labels.csv)",
    }


@pytest.mark.parametrize("odd, label", [(b"1.0", 1), (b"+1", 1), (b"1e0", 1), (b" 7\n", 7), (b"-1", None),
                                        (b"\xff\xfe", None)])
def test_one_odd_cls_value_never_renumbers_the_others(tmp_path, odd, label):
    samples = [(f"s{c:02d}", coded(c, c), {"cls": str(c).encode()}) for c in range(11)]
    samples.append(("odd", coded(label if label is not None else 0, 3), {"cls": odd}))
    shard = write_shard(tmp_path / "shard.tar", samples)
    out = preprocess(str(shard), tmp_path / "out.iof", progress=False, workers=1, val_fraction=0).out
    assert Manifest.read(out).classes == [str(c) for c in range(11)]
    assert assert_labels_match_pixels(out) == (12 if label is not None else 11)
    reasons = rejected(out)
    if label is None:
        assert list(reasons) == [f"{shard}#odd"] and reasons[f"{shard}#odd"].startswith("label not a class (")
    indexed = index_shards(str(shard), tmp_path / "ix.iof")
    assert indexed.samples == (12 if label is not None else 11)
    assert Manifest.read(tmp_path / "ix.iof").classes == [str(c) for c in range(11)]


def test_cls_indices_beside_txt_names_are_refused_naming_both(tmp_path):
    samples = [(f"s{c}", coded(c, c), {"cls": str(c).encode()}) for c in range(3)]
    samples.append(("named", coded(0), {"txt": b"cat"}))
    shard = write_shard(tmp_path / "shard.tar", samples)
    with pytest.raises(SourceError, match=r"mix class indices \(0, 1, 2\) and class names \('cat'\), e\.g\. "
                                          r".*shard\.tar#s0: 0 and .*shard\.tar#named: 'cat'"):
        preprocess(str(shard), tmp_path / "out.iof", progress=False, workers=1)


@pytest.mark.parametrize("members, value", [({"cls": b"5000000"}, 5000000), ({"cls": b"1" + b"0" * 23}, 10**23),
                                            ({"json": b'{"label": [1, 99999999999]}'}, 99999999999)])
def test_huge_integer_labels_are_refused_naming_the_value_not_made_classes(tmp_path, members, value):
    samples = [(f"s{c}", coded(c, c), {"cls": str(c).encode()}) for c in range(6)]
    samples.append(("huge", coded(0), members))
    shard = write_shard(tmp_path / "shard.tar", samples)
    message = rf"label {value} \(.*shard\.tar#huge\) would make {value + 1:,} classes for 7 distinct labels"
    with pytest.raises(SourceError, match=message):
        preprocess(str(shard), tmp_path / "out.iof", progress=False, workers=1)
    with pytest.raises(SourceError, match=message):
        index_shards(str(shard), tmp_path / "ix.iof")


def test_the_dense_class_bound_scales_with_the_labels_used():
    targets = Targets()
    for value in (0, 1, 65535):  # up to 2**16 classes whatever the count
        targets.add(value)
    assert len(targets.resolve().names) == 65536
    many = Targets()
    for value in [*range(10000), 79999]:  # 8x the 10,001 labels used
        many.add(value)
    assert len(many.resolve().names) == 80000
    many.add(80017)
    with pytest.raises(SourceError, match="label 80017 .* 80,018 classes .* at most 80,016 classes"):
        many.resolve()


@pytest.mark.pyarrow
def test_a_class_label_outside_its_names_rejects_that_row_by_name(tmp_path):
    # Hugging Face writes -1 for "no label" in a ClassLabel column
    import pyarrow as pa
    import pyarrow.parquet as pq

    features = {"image": {"_type": "Image"}, "label": {"_type": "ClassLabel", "names": ["zero", "one", "two"]}}
    table = pa.table({"image": pa.array([coded(i % 3, i) for i in range(6)] + [coded(0)], pa.binary()),
                      "label": [0, 1, 2, 0, 1, 2, -1]})
    table = table.replace_schema_metadata({"huggingface": json.dumps({"info": {"features": features}})})
    pq.write_table(table, tmp_path / "t.parquet")
    out = preprocess(tmp_path / "t.parquet", tmp_path / "out.iof", progress=False, workers=1, val_fraction=0).out
    manifest = Manifest.read(out)
    assert manifest.classes == ["zero", "one", "two"]
    for name, (image, classes, _) in read_dataset(out).items():
        assert classes == [decoded(image)], name
    assert rejected(out) == {f"{tmp_path / 't.parquet'}#6": "label not one of the classes (-1; the 3 classes: "
                                                            "zero, one, two)"}


def coded_folder(root: Path, names: list[str]) -> Path:
    """Images `names[i]` under `root` whose pixels encode `i % 4`."""
    for i, rel in enumerate(names):
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_bytes(coded(i % 4, i))
    return root


@pytest.mark.parametrize("listed, on_disk", [
    (["./img/000.jpg", "img/../img/001.jpg", "img\\002.jpg", "img//003"], ["img/000.jpg", "img/001.jpg",
                                                                         "img/002.jpg", "img/003.jpg"]),
    (["img/cafe\u0301.jpg", "img/na\u00efve.jpg"], ["img/caf\u00e9.jpg", "img/nai\u0308ve.jpg"]),  # NFD / NFC
])
def test_labels_file_paths_match_however_they_are_written(tmp_path, listed, on_disk):
    src = coded_folder(tmp_path / "src", on_disk)
    labels = tmp_path / "labels.csv"
    labels.write_text("path,label\n" + "".join(f'"{path}",{i % 4}\n' for i, path in enumerate(listed)))
    out = preprocess(src, tmp_path / "out.iof", labels=labels, progress=False, workers=1, val_fraction=0).out
    assert assert_labels_match_pixels(out) == len(listed) and rejected(out) == {}


def test_a_csv_without_a_header_keeps_its_first_row(tmp_path):
    src = coded_folder(tmp_path / "src", [f"{i}.jpg" for i in range(4)])
    labels = tmp_path / "labels.csv"
    labels.write_text("".join(f"{i}.jpg,{i % 4},note{i}\n" for i in range(4)))
    out = preprocess(src, tmp_path / "out.iof", labels=labels, progress=False, workers=1, val_fraction=0).out
    assert assert_labels_match_pixels(out) == 4 and rejected(out) == {}
    assert {extra["column3"] for _, _, extra in read_dataset(out).values()} == {f"note{i}" for i in range(4)}


def test_a_labels_file_matching_no_image_shows_a_listed_path_beside_a_file(tmp_path):
    src = coded_folder(tmp_path / "src", [f"img/{i}.jpg" for i in range(3)])
    labels = tmp_path / "labels.csv"
    labels.write_text("path,label\n" + "".join(f"photos/{i}.jpg,{i}\n" for i in range(3)))
    with pytest.raises(SourceError, match=r"no path listed in .*labels\.csv names a file under .*src: e\.g\. line 2 "
                                          r"lists 'photos/0\.jpg', and the files are like 'img/0\.jpg'"):
        preprocess(src, tmp_path / "out.iof", labels=labels, progress=False, workers=1)


@pytest.mark.parametrize("option", [{"label_column": "label"}, {"image_column": "image"}])
def test_a_column_option_for_a_class_folder_is_refused_not_ignored(tmp_path, option):
    make_colour_tree(tmp_path / "photos", per_class=2)
    flag = "--" + next(iter(option)).replace("_", "-")
    with pytest.raises(OptionError, match=rf"{flag} {next(iter(option.values()))}: .*photos is a folder source"):
        preprocess(tmp_path / "photos", tmp_path / "out.iof", progress=False, workers=1, **option)
    assert not (tmp_path / "out.iof").exists()


@pytest.mark.parametrize("targets, field", [({"kind": "banana", "extras": False, "files": {}}, "targets.kind"),
                                            ({"kind": "class", "extras": "no", "files": {}}, "targets.extras"),
                                            ("class", "targets")])
def test_a_manifest_targets_entry_iofeed_does_not_write_is_refused(tmp_path, targets, field):
    make_colour_tree(tmp_path / "photos", per_class=2)
    out = preprocess(tmp_path / "photos", tmp_path / "out.iof", progress=False, workers=1).out
    raw = json.loads((out / MANIFEST_NAME).read_text())
    raw["targets"] = targets
    (out / MANIFEST_NAME).write_text(json.dumps(raw))
    with pytest.raises(DatasetError, match=rf'malformed manifest .*"{field}" must be'):
        iofeed.loader(str(out), batch_size=2, workers=1)


def test_val_fraction_one_puts_every_image_in_the_val_split(tmp_path):
    # ImageNet's validation images: a labels file over one split, which must not be split again
    src = coded_folder(tmp_path / "val", [f"ILSVRC2012_val_{i:08d}.JPEG" for i in range(8)])
    listing = tmp_path / "val_labels.txt"
    listing.write_text("".join(f"ILSVRC2012_val_{i:08d}.JPEG {i % 4}\n" for i in range(8)))
    assert main(["preprocess", str(src), "--labels", str(listing), "-o", str(tmp_path / "val.iof"),
                 "--val-fraction", "1"]) == 0
    manifest = Manifest.read(tmp_path / "val.iof")
    assert {name: info.samples for name, info in manifest.splits.items()} == {"val": 8}
    with iofeed.loader(str(tmp_path / "val.iof"), split="val", batch_size=4, image_size=16, workers=1) as ld:
        seen = [(int(manifest.classes[label]), decoded(image)) for images, labels in ld
                for image, label in zip(images, labels, strict=True)]
    assert len(seen) == 8 and all(label == coded_as for label, coded_as in seen)


def test_a_label_member_that_is_not_utf8_is_rejected_not_made_a_class(tmp_path):
    samples = [(f"s{c}", coded(c, c), {"label": str(c).encode()}) for c in range(3)]
    samples.append(("bad", coded(0), {"label": b"\xff1"}))
    shard = write_shard(tmp_path / "shard.tar", samples)
    out = preprocess(str(shard), tmp_path / "out.iof", label_column="label", progress=False, workers=1,
                     val_fraction=0).out
    assert Manifest.read(out).classes == ["0", "1", "2"] and assert_labels_match_pixels(out) == 3
    assert rejected(out) == {f"{shard}#bad": "label not a class (its label member is not UTF-8 text)"}


@pytest.mark.pyarrow
def test_label_names_makes_booleans_classes_when_the_user_asks(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    flags = [i % 3 == 0 for i in range(9)]
    pq.write_table(pa.table({"image": pa.array([coded(int(f), i) for i, f in enumerate(flags)], pa.binary()),
                             "label": flags}), tmp_path / "t.parquet")
    assert main(["preprocess", str(tmp_path / "t.parquet"), "-o", str(tmp_path / "out.iof"), "--label-names",
                 "--val-fraction", "0"]) == 0
    manifest = Manifest.read(tmp_path / "out.iof")
    assert manifest.classes == ["false", "true"]
    for name, (image, classes, _) in read_dataset(tmp_path / "out.iof").items():
        assert classes == [decoded(image)], name


def test_label_names_takes_sparse_integer_ids_as_names_in_index(tmp_path):
    ids = {0: 7, 1: 5000000, 2: 10**23}  # the label each coded picture carries
    samples = [(f"s{i}", coded(i % 3, i), {"cls": str(ids[i % 3]).encode()}) for i in range(6)]
    shard = write_shard(tmp_path / "shard.tar", samples)
    assert main(["index", str(shard), "-o", str(tmp_path / "ix.iof"), "--label-names"]) == 0
    manifest = Manifest.read(tmp_path / "ix.iof")
    assert sorted(manifest.classes) == sorted(str(v) for v in ids.values())
    with iofeed.loader(str(tmp_path / "ix.iof"), batch_size=3, image_size=16, workers=1) as ld:
        for images, labels in ld:
            assert [manifest.classes[label] for label in labels] == [str(ids[decoded(img)]) for img in images]


def test_label_names_is_refused_where_it_cannot_apply(tmp_path):
    make_colour_tree(tmp_path / "photos", per_class=2)
    with pytest.raises(OptionError, match=r"--label-names: .*photos is a folder source"):
        preprocess(tmp_path / "photos", tmp_path / "out.iof", progress=False, workers=1, label_names=True)
    targets = Targets(names=["a", "b"])
    targets.add(0)
    with pytest.raises(OptionError, match="--label-names: the labels have class names already"):
        targets.as_names()


def test_labels_past_ints_digit_limit_are_rejected_or_names_never_a_crash(tmp_path):
    digits = "9" * 5000  # int() refuses more than 4300 digits
    samples = [(f"s{c}", coded(c, c), {"cls": str(c).encode()}) for c in range(3)]
    samples.append(("long", coded(0), {"cls": digits.encode()}))
    shard = write_shard(tmp_path / "shard.tar", samples)
    out = preprocess(str(shard), tmp_path / "out.iof", progress=False, workers=1, val_fraction=0).out
    assert assert_labels_match_pixels(out) == 3
    assert rejected(out) == {f"{shard}#long": "label not a class (inf is not an integer class index)"}
    texts = Targets()  # as text (a txt member, a CSV cell) the same number: one rule per spelling
    for value in ("cat", digits):
        texts.add(value)
    assert texts.check() == {1: "label not a class (inf is not an integer class index)"}
    names = Targets()  # --label-names: the digits as written, a class name
    for value in ("cat", digits):
        names.add(value)
    names.as_names()
    assert names.resolve().names == sorted(["cat", digits])


@pytest.mark.parametrize("command", ["preprocess", "index"])
def test_one_odd_json_label_among_indices_is_rejected_by_name_and_the_rest_load(tmp_path, command):
    samples = [(f"s{c}", coded(c % 4, c), {"json": json.dumps({"label": c % 4}).encode()}) for c in range(8)]
    odd = {"true": b'{"label": true}', "float": b'{"label": 2.0}', "nan": b'{"label": NaN}',
           "object": b'{"label": {"a": 1}}'}
    samples += [(key, coded(2 if key == "float" else 0, 9), {"json": data}) for key, data in odd.items()]
    shard = write_shard(tmp_path / "shard.tar", samples)
    out = tmp_path / "out.iof"
    split = ["--val-fraction", "0"] if command == "preprocess" else []
    assert main([command, str(shard), "-o", str(out), *split]) == 0
    assert Manifest.read(out).classes == ["0", "1", "2", "3"]
    with iofeed.loader(str(out), batch_size=3, image_size=16, workers=1, drop_last=False) as ld:
        seen = [(int(Manifest.read(out).classes[label]), decoded(image)) for images, labels in ld
                for image, label in zip(images, labels, strict=True)]
    assert len(seen) == 9 and all(label == coded_as for label, coded_as in seen)  # 2.0 is class 2
    reasons = {path.rsplit("#", 1)[1]: reason for path, reason in rejected(out).items()}
    assert reasons == {"true": "label not a class (true is a boolean: write the classes as 0/1 or as names, or pass "
                               "--label-names)",
                       "nan": "no label (cls, txt or json 'label'; members: jpg, json)",
                       "object": 'label not a class ({"a": 1}: other samples have classes)'}


@pytest.mark.pyarrow
def test_a_decimal_label_column_keeps_its_integer_classes_and_a_date_one_is_refused_by_type(tmp_path):
    import pyarrow as pa

    src = parquet(tmp_path / "t.parquet", [Decimal(i % 3) for i in range(6)], pa.decimal128(5, 0))
    out = preprocess(src, tmp_path / "out.iof", progress=False, workers=1, val_fraction=0).out
    assert Manifest.read(out).classes == ["0", "1", "2"] and assert_labels_match_pixels(out) == 6
    dates = parquet(tmp_path / "d.parquet", [0, 1, 2], pa.date32())
    with pytest.raises(SourceError, match=r"label not a class \(date 1970-01-01: the label must be a class index"):
        preprocess(dates, tmp_path / "d.iof", progress=False, workers=1)


def test_a_repeated_labels_row_keeps_a_one_class_dataset_one_class(tmp_path):
    root = labelled_folder(tmp_path, ["0", "1", "2", "3"])
    (root / "labels.csv").write_text((root / "labels.csv").read_text() + '3.jpg,"3"\n')
    out = preprocess(root / "img", tmp_path / "out.iof", labels=root / "labels.csv", progress=False, workers=1,
                     val_fraction=0).out
    assert Manifest.read(out).targets["kind"] == "class"  # its shards keep `cls` members (not classes.json)
    assert assert_labels_match_pixels(out) == 4 and rejected(out) == {}


def test_two_files_whose_names_differ_only_in_unicode_form_are_never_confused(tmp_path):
    nfc, nfd = "caf\u00e9.jpg", "cafe\u0301.jpg"
    src = coded_folder(tmp_path / "src", [nfc, nfd, "ok.jpg"])  # pixels: 0, 1, 2
    labels = tmp_path / "labels.csv"
    labels.write_text(f"path,label\n{nfd},1\n./{nfc},0\nok.jpg,2\n")  # NFD as on disk; ./NFC fits both
    out = preprocess(src, tmp_path / "out.iof", labels=labels, progress=False, workers=1, val_fraction=0).out
    assert sorted(read_dataset(out)) == sorted([nfd, "ok.jpg"]) and assert_labels_match_pixels(out) == 2
    lines = sorted((r["path"], r["reason"]) for r in map(json.loads, (out / "rejected.jsonl").read_text().splitlines()))
    assert lines == sorted([(f"./{nfc}", f"listed in {labels}, which fits {', '.join(sorted([nfc, nfd]))} alike: "
                                         "rename one of them"), (nfc, "not in the labels file labels.csv")])


@pytest.mark.storage
@pytest.mark.parametrize("command", ["preprocess", "index"])
def test_odd_labels_in_shards_over_http_are_rejected_by_url(tmp_path, command):
    from helpers.storage import CountingServer

    samples = [(f"s{c}", coded(c % 4, c), {"cls": str(c % 4).encode()}) for c in range(8)]
    samples += [("neg", coded(0), {"cls": b"-1"}), ("flag", coded(0), {"json": b'{"label": true}'})]
    write_shard(tmp_path / "shard.tar", samples)
    server = CountingServer(tmp_path)
    out = tmp_path / "out.iof"
    try:
        url = f"{server.url}/shard.tar"
        split = ["--val-fraction", "0"] if command == "preprocess" else []
        assert main([command, url, "-o", str(out), *split]) == 0
        classes = Manifest.read(out).classes
        with iofeed.loader(str(out), batch_size=4, image_size=16, workers=1,
                           cache=iofeed.Cache(dir=tmp_path / "cache")) as ld:
            seen = [(int(classes[label]), decoded(image)) for images, labels in ld
                    for image, label in zip(images, labels, strict=True)]
    finally:
        server.close()
    assert classes == ["0", "1", "2", "3"] and len(seen) == 8 and all(a == b for a, b in seen)
    assert {path: reason.split(" (")[0] for path, reason in rejected(out).items()} == {
        f"{url}#neg": "label not a class", f"{url}#flag": "label not a class"}


def test_a_labels_file_that_is_not_utf8_says_what_to_pass(tmp_path):
    src = coded_folder(tmp_path / "src", ["0.jpg"])
    (tmp_path / "labels.csv").write_bytes(b"\xff\xfe0.jpg,0\n")
    with pytest.raises(SourceError, match=r"cannot read labels file .*labels\.csv: .*\(pass a UTF-8 text file"):
        preprocess(src, tmp_path / "out.iof", labels=tmp_path / "labels.csv", progress=False, workers=1)


@pytest.mark.parametrize("form", ["csv", "csv-no-header", "jsonl", "plain"])
def test_a_labels_file_with_a_byte_order_mark_keeps_its_first_image(tmp_path, form):
    """Excel and Notepad write a UTF-8 byte-order mark: read as text it glued itself to the first
    path ("\ufeff0.jpg", not found) and that image was rejected quietly while preprocess went on."""
    src = coded_folder(tmp_path / "src", [f"{i}.jpg" for i in range(8)])  # pixels: i % 4
    rows = [(f"{i}.jpg", i % 4) for i in range(8)]
    text = {"csv": "path,label\n" + "".join(f"{p},{c}\n" for p, c in rows),
            "csv-no-header": "".join(f"{p},{c}\n" for p, c in rows),
            "jsonl": "".join(json.dumps({"path": p, "label": c}) + "\n" for p, c in rows),
            "plain": "".join(f"{p} {c}\n" for p, c in rows)}[form]
    labels = tmp_path / "labels.txt"
    labels.write_bytes(b"\xef\xbb\xbf" + text.encode())
    out = preprocess(src, tmp_path / "out.iof", labels=labels, progress=False, workers=1, val_fraction=0).out
    assert rejected(out) == {} and assert_labels_match_pixels(out) == 8
    assert sorted(read_dataset(out)) == sorted(p for p, _ in rows)
