"""Preprocess from every source kind: WebDataset shards (local and over HTTP), Parquet, a saved
Hugging Face dataset, labels files (multi-label CSV, ImageNet-style validation lists)."""
from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pytest

from helpers.sources import close_to, read_dataset, write_webdataset
from iofeed.errors import SourceError
from iofeed.format.manifest import Manifest
from iofeed.prepare.run import preprocess
from iofeed.prepare.sources.base import SourceOptions
from iofeed.prepare.sources.kinds import detect
from iofeed.prepare.sources.label_targets import Targets
from iofeed.prepare.sources.shardlist import expand_braces


def _rejected(out: Path) -> dict[str, str]:
    return {r["path"]: r["reason"] for r in map(json.loads, (out / "rejected.jsonl").read_text().splitlines())}


def _check_equal(out: Path, expected: dict, classes: list[str]) -> dict:
    """Every expected sample is in the dataset with its pixels and its label (an index or a class name)."""
    stored = read_dataset(out)
    assert set(stored) == set(expected)
    for name, (source_pixels, label) in expected.items():
        image, found, _ = stored[name]
        assert close_to(image, source_pixels), name
        want = label if isinstance(label, list) else [label]
        assert [classes[i] for i in found] == sorted(str(v) for v in want) or found == sorted(want), name
    return stored


@pytest.mark.pyarrow
def test_a_folder_of_parquet_files_and_tar_shards_is_refused_not_half_read(tmp_path):
    import io
    import tarfile

    import pyarrow as pa
    import pyarrow.parquet as pq

    pq.write_table(pa.table({"image": pa.array([b"x"], pa.binary()), "label": [0]}), tmp_path / "a.parquet")
    with tarfile.open(tmp_path / "b.tar", "w") as tar:
        tar.addfile(tarfile.TarInfo("s0.cls"), io.BytesIO(b""))
    with pytest.raises(SourceError, match="both Parquet files and tar shards"):
        detect(str(tmp_path), SourceOptions())


def test_brace_lists_expand_like_shell_ranges():
    assert expand_braces("s-{008..011}.tar") == ["s-008.tar", "s-009.tar", "s-010.tar", "s-011.tar"]
    assert expand_braces("{a,b}/x{1..2}") == ["a/x1", "a/x2", "b/x1", "b/x2"]
    with pytest.raises(SourceError, match="empty range"):
        expand_braces("x{3..1}")


def test_integer_and_named_labels_together_are_refused_naming_both():
    # cls 0..11 in some shards, json names in others: sorted as text, cls 2 would become label 4
    targets = Targets()
    for value in [*range(12), "cat"]:
        targets.add(value)
    with pytest.raises(SourceError, match=r"mix class indices \(0, 1, 2, \.\.\.\) and class names \('cat'\)"):
        targets.resolve()


def test_a_multi_label_sample_with_no_class_has_no_extra():
    targets = Targets()
    for value in (["cat", "dog"], [], ["dog"]):
        targets.add(value)
    resolved = targets.resolve()
    assert resolved.classes == [[0, 1], [], [1]]
    assert resolved.extras == [None, None, None] and not resolved.has_extras and not targets.has_extras


@pytest.mark.slow  # importing webdataset takes most of it
def test_webdataset_written_by_webdataset_is_read_with_every_image_kind_and_label(tmp_path):
    expected = write_webdataset(tmp_path / "wds")
    summary = preprocess(str(tmp_path / "wds" / "shard-{000000..000001}.tar"), tmp_path / "out.iof",
                         progress=False, workers=1)
    manifest = Manifest.read(summary.out)
    assert manifest.source["kind"] == "webdataset"
    assert manifest.classes == [str(c) for c in range(7)]
    stored = _check_equal(summary.out, expected, manifest.classes)
    captions = {name: extra for name, (_, _, extra) in stored.items() if extra is not None}
    assert len(captions) == 6 and all(extra["caption"].startswith("picture") for extra in captions.values())
    assert manifest.targets["kind"] == "class" and manifest.targets["extras"] is True
    shard = tmp_path / "wds" / "shard-000001.tar"
    rejected = _rejected(summary.out)
    assert set(rejected) == {f"{shard}#nolabel", f"{shard}#noimage", f"{shard}#broken"}
    assert rejected[f"{shard}#nolabel"].startswith("no label")
    assert rejected[f"{shard}#noimage"].startswith("no image")
    assert "truncated" in rejected[f"{shard}#broken"] or "decode" in rejected[f"{shard}#broken"]


def test_shards_are_recognised_by_content_not_name(tmp_path):
    write_webdataset(tmp_path / "wds", shards=1)
    (tmp_path / "wds" / "shard-000000.tar").rename(tmp_path / "wds" / "data.bin")
    assert detect(str(tmp_path / "wds"), SourceOptions()) == "webdataset"
    assert detect(str(tmp_path / "wds" / "data.bin"), SourceOptions()) == "webdataset"


@pytest.mark.storage
def test_webdataset_over_http_from_a_brace_list_of_urls(tmp_path):
    from helpers.storage import CountingServer

    expected = write_webdataset(tmp_path / "wds")
    server = CountingServer(tmp_path / "wds")
    try:
        url = f"{server.url}/shard-{{000000..000001}}.tar"
        summary = preprocess(url, tmp_path / "out.iof", progress=False, workers=1)
    finally:
        server.close()
    assert server.gets["/shard-000000.tar"] == 1 and server.gets["/shard-000001.tar"] == 1
    stored = read_dataset(summary.out)
    by_key = {name.split("#")[1]: value for name, value in stored.items()}
    assert set(by_key) == {name.split("#")[1] for name in expected}
    for name, (source_pixels, _) in expected.items():
        assert close_to(by_key[name.split("#")[1]][0], source_pixels)
    assert all(name.startswith(server.url) for name in stored)
    assert not list(tmp_path.glob(".out.iof.spool-*")), "the downloaded copies are removed"
    assert len(_rejected(summary.out)) == 3


def _table_rows(count: int) -> tuple[list, list, dict]:
    """Images as bytes (jpg/png/webp), labels as indices; bad rows 90 (null label) and 91 (no image)."""
    from helpers.sources import encode, picture

    images, labels, expected = [], [], {}
    for i in range(count):
        img = picture(i)
        images.append(encode(img, ("jpg", "png", "webp")[i % 3]))
        labels.append(i % 4)
        expected[i] = (np.asarray(img), i % 4)
    images += [encode(picture(90), "png"), None]
    labels += [None, 1]
    return images, labels, expected


@pytest.mark.pyarrow
def test_parquet_written_by_pyarrow_is_read_a_row_group_at_a_time(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    images, labels, expected = _table_rows(10)
    structs = [{"bytes": data, "path": None} for data in images]  # the {"bytes", "path"} form of HF Image
    table = pa.table({"img": pa.array(structs), "label": pa.array(labels, pa.int64())})
    pq.write_table(table, tmp_path / "part.parquet", row_group_size=4)
    assert pq.ParquetFile(tmp_path / "part.parquet").num_row_groups == 3
    summary = preprocess(tmp_path / "part.parquet", tmp_path / "out.iof", progress=False, workers=1)
    manifest = Manifest.read(summary.out)
    assert manifest.source["kind"] == "parquet" and manifest.classes == ["0", "1", "2", "3"]
    where = str(tmp_path / "part.parquet")
    _check_equal(summary.out, {f"{where}#{i}": v for i, v in expected.items()}, manifest.classes)
    rejected = _rejected(summary.out)
    assert rejected == {f"{where}#10": "no label (column 'label' is null)",
                        f"{where}#11": "no image (column 'img' is empty)"}


def _parquet_of(tmp_path: Path, count: int) -> tuple[Path, int]:
    """A Parquet file of `count` good rows (and `_table_rows`' two bad ones); the bytes of its images."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    images, labels, _ = _table_rows(count)
    path = tmp_path / "src" / "part.parquet"
    path.parent.mkdir()
    pq.write_table(pa.table({"img": pa.array(images, pa.binary()), "label": pa.array(labels, pa.int64())}), path,
                   row_group_size=4)
    return path, sum(len(data) for data, label in zip(images, labels) if data and label is not None)


@pytest.mark.pyarrow
def test_parquet_cells_past_the_spool_s_room_are_refused_leaving_no_partial_copy(tmp_path):
    """preprocess copied every image cell of a table into its spool without a bound (a table larger
    than the disk beside OUT filled it); now, as a compressed tar's copy, only within the spool's
    room (free space less a reserve; here injected), in one line naming the file and the bound."""
    from iofeed.prepare.sources.tables import scan_parquet

    path, size = _parquet_of(tmp_path, 10)
    spool = tmp_path / "spool"
    with pytest.raises(SourceError) as refused:
        scan_parquet(str(path), SourceOptions(spool=spool), room=size - 1)
    message = str(refused.value)
    bound = f"{path}: copied out (its image cells), it passes {size - 1:,} bytes, the room for it beside the output"
    assert "\n" not in message and message.startswith(bound), message
    assert message.endswith("write the output (-o) to a disk with room for the table's images")
    assert list(spool.iterdir()) == [], "no partial copy left"
    scan = scan_parquet(str(path), SourceOptions(spool=spool), room=size)
    assert len(scan.paths) == 10 and (spool / "000000.bin").stat().st_size == size
    blob = (spool / "000000.bin").read_bytes()
    images, _, _ = _table_rows(10)
    assert [blob[start:start + length] for start, length in scan.spans] == images[:10], "each cell at its offset"


@pytest.mark.pyarrow
@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs Linux's /dev/full, a disk always full")
def test_a_full_disk_under_parquet_cells_is_a_one_line_error_naming_the_file(tmp_path):
    """A write of the spool file that the disk fails raised a bare OSError naming neither the table
    nor what to do; now it is the spool's one-line error, and the partial file is removed."""
    from iofeed.prepare.sources.tables import scan_parquet

    path, _ = _parquet_of(tmp_path, 3)
    spool = tmp_path / "spool"
    spool.mkdir()
    (spool / "000000.bin").symlink_to("/dev/full")  # writes fail with ENOSPC; removing the link leaves it be
    with pytest.raises(SourceError) as refused:
        scan_parquet(str(path), SourceOptions(spool=spool), room=1 << 30)
    message = str(refused.value)
    assert "\n" not in message and message.startswith(f"{path}: writing it copied out (its image cells) beside the "
                                                       f"output in {tmp_path} failed after "), message
    assert "(No space left on device)" in message and not os.path.lexists(spool / "000000.bin")


@pytest.mark.pyarrow
@pytest.mark.parametrize(("option", "message"), [({"image_column": "label"}, "column 'label' holds int64, not images"),
                                                 ({"label_column": "img"}, "column 'img' holds bytes")])
def test_a_parquet_column_option_naming_the_wrong_kind_of_column_is_one_line(tmp_path, option, message):
    import pyarrow as pa
    import pyarrow.parquet as pq

    images, labels, _ = _table_rows(2)
    pq.write_table(pa.table({"img": pa.array(images, pa.binary()), "label": pa.array(labels, pa.int64())}),
                   tmp_path / "part.parquet")
    with pytest.raises(SourceError, match=message):
        preprocess(tmp_path / "part.parquet", tmp_path / "out.iof", progress=False, workers=1, **option)


@pytest.mark.pyarrow
def test_a_damaged_or_foreign_parquet_file_is_a_one_line_error_naming_it(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    images, labels, _ = _table_rows(2)
    pq.write_table(pa.table({"img": pa.array(images, pa.binary()), "label": pa.array(labels, pa.int64())}),
                   tmp_path / "a.parquet")
    (tmp_path / "cut.parquet").write_bytes((tmp_path / "a.parquet").read_bytes()[:200])
    with pytest.raises(SourceError, match=r"cannot read Parquet file .*cut\.parquet: .*write it again") as caught:
        preprocess(tmp_path / "cut.parquet", tmp_path / "out.iof", progress=False, workers=1)
    assert "\n" not in str(caught.value)
    footer = bytearray((tmp_path / "a.parquet").read_bytes())
    footer[-8:-4] = (100).to_bytes(4, "little")  # the footer's length: pyarrow's thrift error spans two lines
    (tmp_path / "footer.parquet").write_bytes(bytes(footer))
    with pytest.raises(SourceError, match=r"cannot read Parquet file .*footer\.parquet: .*write it again") as caught:
        preprocess(tmp_path / "footer.parquet", tmp_path / "out.iof", progress=False, workers=1)
    assert "\n" not in str(caught.value)
    damaged = bytearray((tmp_path / "a.parquet").read_bytes())
    damaged[8:300] = b"\xff" * 292  # the first page header: the footer still reads
    (tmp_path / "page.parquet").write_bytes(bytes(damaged))
    with pytest.raises(SourceError, match=r"cannot read Parquet file .*page\.parquet: .*write it again") as caught:
        preprocess(tmp_path / "page.parquet", tmp_path / "out.iof", progress=False, workers=1)
    assert "\n" not in str(caught.value)
    (tmp_path / "both").mkdir()
    (tmp_path / "a.parquet").rename(tmp_path / "both" / "a.parquet")
    pq.write_table(pa.table({"picture": pa.array(images, pa.binary())}), tmp_path / "both" / "b.parquet")
    with pytest.raises(SourceError, match=r"b\.parquet has no column 'img', which a\.parquet has"):
        preprocess(tmp_path / "both", tmp_path / "out.iof", progress=False, workers=1)


@pytest.mark.pyarrow
def test_parquet_folder_with_class_names_and_binary_images(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    images, labels, expected = _table_rows(8)
    names = ["cat", "dog", "eel", "fox"]
    folder = tmp_path / "pq"
    folder.mkdir()
    for part, rows in enumerate((slice(0, 5), slice(5, None))):
        table = pa.table({"label": pa.array([None if v is None else names[v] for v in labels[rows]]),
                          "image": pa.array(images[rows], pa.binary()),
                          "score": pa.array([0.5 * i for i in range(len(images))][rows], pa.float32())})
        pq.write_table(table, folder / f"part-{part}")  # no extension: found by content
    summary = preprocess(folder, tmp_path / "out.iof", progress=False, workers=1)
    manifest = Manifest.read(summary.out)
    assert manifest.classes == names
    stored = read_dataset(summary.out)
    assert len(stored) == 8
    by_row = {(Path(name.split("#")[0]).name, int(name.split("#")[1])): v for name, v in stored.items()}
    for i, (source_pixels, label) in expected.items():
        image, classes, extra = by_row[("part-0", i) if i < 5 else ("part-1", i - 5)]
        assert close_to(image, source_pixels) and classes == [label] and extra == {"score": 0.5 * i}


@pytest.mark.datasets
@pytest.mark.pyarrow
def test_hugging_face_dataset_saved_to_disk(tmp_path):
    import datasets

    from helpers.sources import picture

    features = datasets.Features({"image": datasets.Image(),
                                  "label": datasets.ClassLabel(names=["zebra", "apple", "mango"])})
    pictures = [picture(i) for i in range(9)]
    data = datasets.Dataset.from_dict({"image": pictures, "label": [i % 3 for i in range(9)]}, features=features)
    data.save_to_disk(str(tmp_path / "hf"), max_shard_size="20KB")
    summary = preprocess(tmp_path / "hf", tmp_path / "out.iof", progress=False, workers=1)
    manifest = Manifest.read(summary.out)
    assert manifest.source["kind"] == "hf"
    assert manifest.classes == ["zebra", "apple", "mango"], "ClassLabel names kept in their order"
    stored = read_dataset(summary.out)
    assert len(stored) == 9
    row = 0
    by_position = sorted(stored, key=lambda n: (n.split("#")[0], int(n.split("#")[1])))
    for name in by_position:
        image, classes, _ = stored[name]
        assert close_to(image, np.asarray(pictures[row])) and classes == [row % 3], name
        row += 1


@pytest.mark.pyarrow
@pytest.mark.parametrize(("state", "message"), [
    ("{not json", r"cannot read .*state\.json: Expecting"),
    ("[]", r"state\.json holds a list"),
    ('{"_data_files": [{"filename": "d.arrow"}]}', "lists d.arrow, which is missing"),
])
def test_a_damaged_saved_dataset_is_a_one_line_error_naming_its_file(tmp_path, state, message):
    (tmp_path / "saved").mkdir()
    (tmp_path / "saved" / "state.json").write_text(state)
    with pytest.raises(SourceError, match=message):
        preprocess(tmp_path / "saved", tmp_path / "out.iof", progress=False, workers=1)


def _saved_by_hand(root: Path) -> Path:
    """A `save_to_disk` folder written with pyarrow alone: one Arrow stream file and its state.json."""
    import pyarrow as pa

    from helpers.sources import encode, picture

    root.mkdir()
    images = pa.array([encode(picture(i), "png") for i in range(3)], pa.binary())
    table = pa.table({"image": images, "label": [0, 1, 0]})
    with pa.OSFile(str(root / "data.arrow"), "wb") as sink, pa.ipc.new_stream(sink, table.schema) as writer:
        writer.write_table(table)
    (root / "state.json").write_text(json.dumps({"_data_files": [{"filename": "data.arrow"}]}))
    return root


@pytest.mark.pyarrow
def test_saved_dataset_cells_past_the_spool_s_room_are_refused_leaving_no_partial_copy(tmp_path):
    """The same bound for a `save_to_disk` folder's Arrow files (their cells share the Parquet copy)."""
    from helpers.sources import encode, picture
    from iofeed.prepare.sources.tables import scan_hf

    root = _saved_by_hand(tmp_path / "saved")
    size = sum(len(encode(picture(i), "png")) for i in range(3))
    spool = tmp_path / "spool"
    with pytest.raises(SourceError) as refused:
        scan_hf(str(root), SourceOptions(spool=spool), room=size - 1)
    assert str(refused.value).startswith(f"{root / 'data.arrow'}: copied out (its image cells), it passes "
                                         f"{size - 1:,} bytes"), str(refused.value)
    assert list(spool.iterdir()) == [], "no partial copy left"
    assert len(scan_hf(str(root), SourceOptions(spool=spool), room=size).paths) == 3


def _halve(path: Path) -> None:
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])


@pytest.mark.pyarrow
@pytest.mark.parametrize(("info", "damage", "message"), [
    ('{"features": []}', None, r"dataset_info\.json: its features are a list, not an object"),
    ('{"features": {"label": "x"}}', None, r"dataset_info\.json: the feature of column 'label' is \"x\""),
    ('{"features": {"label": {"_type": "ClassLabel", "names": 3}}}', None, r"has names 3, not a list of strings"),
    ('{"features": {"label": {"_type": "Sequence", "feature": [1]}}}', None, r"the feature of column 'label' is \[1\]"),
    (None, _halve, r"cannot read .*data\.arrow: .*\(save the dataset again"),
    (None, lambda p: p.write_bytes(b"garbage" * 100), r"cannot read .*data\.arrow: "),
])
def test_damaged_saved_dataset_metadata_and_arrow_files_are_one_line_errors(tmp_path, info, damage, message):
    saved = _saved_by_hand(tmp_path / "saved")
    if info is not None:
        (saved / "dataset_info.json").write_text(info)
    if damage is not None:
        damage(saved / "data.arrow")
    with pytest.raises(SourceError, match=message) as caught:
        preprocess(saved, tmp_path / "out.iof", progress=False, workers=1)
    assert "\n" not in str(caught.value)


@pytest.mark.pyarrow
@pytest.mark.parametrize("metadata", [b"[1]", b'{"info": []}', b'{"info": {"features": []}}'])
def test_damaged_hugging_face_parquet_metadata_is_a_one_line_error_naming_the_file(tmp_path, metadata):
    import pyarrow as pa
    import pyarrow.parquet as pq

    from helpers.sources import encode, picture

    table = pa.table({"image": pa.array([encode(picture(0), "png")], pa.binary()), "label": [0]})
    pq.write_table(table.replace_schema_metadata({"huggingface": metadata}), tmp_path / "t.parquet")
    with pytest.raises(SourceError, match=r"t\.parquet: its"):
        preprocess(tmp_path / "t.parquet", tmp_path / "out.iof", progress=False, workers=1)


def test_labels_csv_with_multi_label_rows(tmp_path):
    from helpers.sources import encode, picture

    src = tmp_path / "photos"
    (src / "a").mkdir(parents=True)
    expected = {}
    for i in range(6):
        (src / "a" / f"{i}.png").write_bytes(encode(picture(i), "png"))
        expected[f"a/{i}.png"] = np.asarray(picture(i))
    (src / "a" / "unlisted.png").write_bytes(encode(picture(7), "png"))
    (src / "a" / "text.png").write_text("not an image")
    rows = ["path,label,score",
            'a/0.png,cat,0.5', 'a/1.png,"[""cat"", ""dog""]",1', 'a/2.png,dog,2', 'a/2.png,bird,2',
            'a/3.png,bird,3', 'a/4.png,"[""dog""]",4', 'a/5.png,cat,5', 'a/text.png,cat,6', 'a/gone.png,dog,7']
    labels = tmp_path / "labels.csv"
    labels.write_text("\n".join(rows) + "\n")
    summary = preprocess(src, tmp_path / "out.iof", labels=labels, progress=False, workers=1, val_fraction=0)
    manifest = Manifest.read(summary.out)
    assert manifest.classes == ["bird", "cat", "dog"]
    assert manifest.targets["kind"] == "multi_label" and manifest.targets["extras"] is True
    want = {"a/0.png": ["cat"], "a/1.png": ["cat", "dog"], "a/2.png": ["bird", "dog"], "a/3.png": ["bird"],
            "a/4.png": ["dog"], "a/5.png": ["cat"]}
    stored = read_dataset(summary.out)
    assert set(stored) == set(want)
    for rel, (image, classes, extra) in stored.items():
        assert close_to(image, expected[rel]) and [manifest.classes[c] for c in classes] == want[rel]
        assert extra == {"score": 0.5 if rel == "a/0.png" else int(rel[2])}
    rejected = _rejected(summary.out)
    assert rejected["a/unlisted.png"] == "not in the labels file labels.csv"
    assert rejected["a/text.png"] == "not an image (unrecognised bytes)"
    assert rejected["a/gone.png"].startswith("listed in")
    assert len(rejected) == 3


def test_imagenet_style_validation_labels(tmp_path):
    from helpers.sources import encode, picture

    src = tmp_path / "val"
    src.mkdir()
    synsets = ["n01440764", "n01443537", "n01484850"]
    for i in range(6):
        (src / f"ILSVRC2012_val_{i + 1:08d}.JPEG").write_bytes(encode(picture(i), "jpg"))
    listing = tmp_path / "val_labels.txt"
    listing.write_text("".join(f"ILSVRC2012_val_{i + 1:08d}.JPEG {synsets[i % 3]}\n" for i in range(6)))
    summary = preprocess(src, tmp_path / "out.iof", labels=listing, progress=False, workers=1, val_fraction=0)
    manifest = Manifest.read(summary.out)
    assert manifest.classes == synsets and manifest.targets["kind"] == "class"
    stored = read_dataset(summary.out)
    assert {rel: manifest.classes[c[0]] for rel, (_, c, _) in stored.items()} == {
        f"ILSVRC2012_val_{i + 1:08d}.JPEG": synsets[i % 3] for i in range(6)}
    solution = tmp_path / "LOC_val_solution.jsonl"  # ids without extensions, as LOC_val_solution.csv
    solution.write_text("".join(json.dumps({"ImageId": f"ILSVRC2012_val_{i + 1:08d}", "label": synsets[i % 3]}) + "\n"
                                for i in range(6)))
    again = preprocess(src, tmp_path / "again.iof", labels=solution, progress=False, workers=1, val_fraction=0)
    assert set(read_dataset(again.out)) == set(stored)


@pytest.mark.parametrize("kind", ["csv", "jsonl"])
def test_labels_file_rows_without_a_label_are_rejected_not_made_a_class(tmp_path, kind):
    from helpers.sources import encode, picture

    src = tmp_path / "photos"
    src.mkdir()
    for i in range(3):
        (src / f"{i}.jpg").write_bytes(encode(picture(i), "jpg"))
    labels = tmp_path / f"labels.{kind}"
    if kind == "csv":
        labels.write_text("path,label\n0.jpg,cat\n1.jpg,\n2.jpg,dog\n")
    else:
        labels.write_text("".join(json.dumps({"path": f"{i}.jpg", "label": v}) + "\n"
                                  for i, v in enumerate(["cat", None, "dog"])))
    summary = preprocess(src, tmp_path / "out.iof", labels=labels, progress=False, workers=1, val_fraction=0)
    assert Manifest.read(summary.out).classes == ["cat", "dog"]
    assert set(read_dataset(summary.out)) == {"0.jpg", "2.jpg"}
    said = {"csv": "empty", "jsonl": "null"}[kind]
    assert _rejected(summary.out) == {"1.jpg": f"no label ({said} in labels.{kind})"}


def test_a_webdataset_sample_with_a_blank_label_is_rejected():
    import io

    from helpers.sources import encode, picture
    from iofeed.prepare.sources.webdataset import sample_of

    image, label = encode(picture(0), "jpg"), json.dumps({"label": " "}).encode()
    members = {"jpg": (0, len(image)), "json": (len(image), len(label))}
    with pytest.raises(ValueError, match="no label"):
        sample_of(io.BytesIO(image + label), members, None)


def test_a_label_column_no_sample_has_is_named_in_the_error(tmp_path):
    import io
    import tarfile

    from helpers.sources import encode, picture

    shard = tmp_path / "shard.tar"
    with tarfile.open(shard, "w") as tar:
        for i in range(3):
            for ext, data in (("jpg", encode(picture(i), "jpg")), ("cls", b"1")):
                info = tarfile.TarInfo(f"s{i}.{ext}")
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
    with pytest.raises(SourceError, match=r"3 files rejected: no label 3; e\.g\. .*shard\.tar#s0: no label \(lable;"):
        preprocess(str(shard), tmp_path / "o.iof", label_column="lable", progress=False, workers=1)


def test_a_listed_stem_that_fits_several_files_says_so(tmp_path):
    from helpers.sources import encode, picture

    src = tmp_path / "photos"
    src.mkdir()
    (src / "a.jpg").write_bytes(encode(picture(0), "jpg"))
    (src / "a.png").write_bytes(encode(picture(1), "png"))
    (src / "b.jpg").write_bytes(encode(picture(2), "jpg"))
    labels = tmp_path / "labels.txt"
    labels.write_text("a cat\nb dog\n")
    summary = preprocess(src, tmp_path / "out.iof", labels=labels, progress=False, workers=1, val_fraction=0)
    reason = _rejected(summary.out)["a"]
    assert "without an extension, which fits a.jpg, a.png: list the file's full name" in reason, reason


def test_labels_file_errors_name_the_line(tmp_path):
    src = tmp_path / "val"
    src.mkdir()
    bad = tmp_path / "bad.txt"
    bad.write_text("onlyapath\n")
    with pytest.raises(SourceError, match="line 1"):
        preprocess(src, tmp_path / "o.iof", labels=bad, progress=False)


_BOUNDED = """
import json, os, sys, threading, time
from pathlib import Path
import pyarrow.parquet
from iofeed.prepare.run import preprocess
page = os.sysconf("SC_PAGE_SIZE")
rss = lambda: int(open("/proc/self/statm").read().split()[1]) * page
before, peak, done = rss(), [0], threading.Event()
def sample():
    while not done.is_set():
        peak[0] = max(peak[0], rss())
        time.sleep(0.005)
watcher = threading.Thread(target=sample)
watcher.start()
summary = preprocess(Path(sys.argv[1]), Path(sys.argv[2]), workers=1, progress=False, val_fraction=0)
done.set()
watcher.join()
print(json.dumps({"before": before, "peak": peak[0], "written": summary.written}))
"""


ROWS = 640


@pytest.mark.slow
@pytest.mark.pyarrow
def test_parquet_larger_than_the_memory_budget_is_read_in_bounded_memory(tmp_path):
    import os
    import subprocess
    import sys

    import pyarrow as pa
    import pyarrow.parquet as pq
    from PIL import Image

    from helpers.images import jpeg_bytes

    budget = 256 << 20  # bytes preprocess may grow by: ~200 MiB whatever the source's size (docs/benchmarks.md)
    rng = np.random.default_rng(0)
    noise = [jpeg_bytes(Image.fromarray(rng.integers(0, 256, (256, 1024, 3), dtype=np.uint8)), quality=100)
             for _ in range(8)]  # ~0.5 MB each, kept as they are (cheap to prepare)
    schema = pa.schema({"image": pa.binary(), "label": pa.int64()})
    with pq.ParquetWriter(tmp_path / "big.parquet", schema) as writer:
        for start in range(0, ROWS, 16):
            # a JPEG comment segment (FFFE) makes each row distinct, so Parquet cannot dictionary-encode them
            images = [noise[i % 8][:2] + b"\xff\xfe\x00\x04" + i.to_bytes(2, "big") + noise[i % 8][2:]
                      for i in range(start, start + 16)]
            writer.write_table(pa.table({"image": images, "label": [i % 5 for i in range(start, start + 16)]},
                                        schema=schema))
    size = (tmp_path / "big.parquet").stat().st_size
    assert size > 1.2 * budget, "the source is larger than the budget"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    out = subprocess.run([sys.executable, "-c", _BOUNDED, str(tmp_path / "big.parquet"), str(tmp_path / "o.iof")],
                         capture_output=True, text=True, env=env, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    result = json.loads(out.stdout.strip().splitlines()[-1])
    grew = result["peak"] - result["before"]
    print(f"source {size / 2**20:.1f} MiB, peak RSS {result['peak'] / 2**20:.1f} MiB, "
          f"{grew / 2**20:.1f} MiB above the RSS before preprocessing (budget {budget >> 20} MiB)")
    assert result["written"] == {"train": ROWS}
    assert 0 < grew < budget


@pytest.mark.slow
@pytest.mark.storage
def test_webdataset_from_s3_by_a_brace_list_of_urls(tmp_path, monkeypatch):
    from helpers.storage import moto_bucket

    expected = write_webdataset(tmp_path / "wds")
    with moto_bucket(monkeypatch) as (fs, bucket):
        for n in range(2):
            fs.put_file(str(tmp_path / "wds" / f"shard-{n:06d}.tar"), f"{bucket}/wds/shard-{n:06d}.tar")
        summary = preprocess(f"{bucket}/wds/shard-{{000000..000001}}.tar", tmp_path / "out.iof", progress=False,
                             workers=1)
    stored = read_dataset(summary.out)
    assert {name.split("#")[1] for name in stored} == {name.split("#")[1] for name in expected}
    assert all(name.startswith(f"{bucket}/wds/shard-") for name in stored)
    assert len(_rejected(summary.out)) == 3


def test_a_killed_runs_spool_is_removed_by_the_next_run(tmp_path):
    import subprocess
    import sys

    write_webdataset(tmp_path / "wds", shards=1)
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    leftover = tmp_path / f".out.iof.spool-{dead.stdout.strip()}-abc"
    leftover.mkdir()
    (leftover / "000000.bin").write_bytes(b"x" * 1000)
    live = tmp_path / f".out.iof.spool-{os.getpid()}-xyz"  # a live run's: kept
    live.mkdir()
    preprocess(str(tmp_path / "wds"), tmp_path / "out.iof", progress=False, workers=1)
    assert not leftover.exists() and live.exists()
    assert sorted(p.name for p in tmp_path.glob(".out.iof.spool-*")) == [live.name]


def test_a_spool_whose_lock_is_held_is_kept_whatever_its_pid(tmp_path):
    """A run in another PID namespace (a container on shared storage) has a PID that is dead here:
    its lock, not its PID, says it is alive."""
    import fcntl

    from iofeed.prepare.output import SPOOL_LOCK, spool_dir

    held = tmp_path / ".out.iof.spool-999999999-abc"  # no such PID here
    held.mkdir()
    unheld = tmp_path / ".out.iof.spool-999999998-def"
    unheld.mkdir()
    (unheld / SPOOL_LOCK).touch()
    with open(held / SPOOL_LOCK, "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        with spool_dir(tmp_path / "out.iof") as mine:
            assert (Path(mine) / SPOOL_LOCK).is_file()
        assert held.exists() and not unheld.exists() and not Path(mine).exists()


def test_caption_shards_without_classes_keep_each_json_as_the_extra(tmp_path):
    import webdataset as wds

    from helpers.sources import encode, picture

    (tmp_path / "wds").mkdir()
    with wds.TarWriter(str(tmp_path / "wds" / "00000.tar")) as sink:  # img2dataset's layout
        for i in range(5):
            sink.write({"__key__": f"{i:09d}", "jpg": encode(picture(i), "jpg"), "txt": f"caption {i}",
                        "json": {"caption": f"caption {i}", "width": picture(i).width}})
    summary = preprocess(str(tmp_path / "wds"), tmp_path / "out.iof", label_column="json", progress=False,
                         workers=1, val_fraction=0)
    manifest = Manifest.read(summary.out)
    assert manifest.classes == [] and manifest.targets["kind"] == "none" and manifest.targets["extras"]
    stored = read_dataset(summary.out)
    assert sorted(extra["caption"] for _, _, extra in stored.values()) == [f"caption {i}" for i in range(5)]
    assert all(classes == [] for _, classes, _ in stored.values())
