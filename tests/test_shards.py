"""iofeed.format.shards: tar shards + wds2idx indexes, read back by tarfile, webdataset and DALI."""
from __future__ import annotations

import hashlib
import io
import shutil
import tarfile
from pathlib import Path

import pytest
from PIL import Image

from iofeed.errors import DatasetError, OptionError
from iofeed.format.identity import probe_of
from iofeed.format.shards import ShardInfo, ShardWriter, read_index, read_member


@pytest.fixture(scope="module")
def samples() -> list[tuple[str, dict[str, bytes]]]:
    """Seven tiny JPEG samples of different sizes, keys with a folder part, text labels."""
    out = []
    for i in range(7):
        buf = io.BytesIO()
        Image.new("RGB", (16 + i, 12 + 2 * i), (30 * i, 255 - 30 * i, 90)).save(buf, "JPEG")
        files = {"jpg": buf.getvalue(), "cls": str(i % 3).encode()}
        out.append((f"class{i % 3}/img{i:04d}", files))
    return out


def write(directory: Path, samples, **kwargs) -> tuple[list[ShardInfo], list[tuple[int, int, int]]]:
    with ShardWriter(directory, "train", **kwargs) as writer:
        places = [writer.add(key, files) for key, files in samples]
    return writer.close(), places


def test_round_trip(tmp_path: Path, samples) -> None:
    shards, places = write(tmp_path, samples)
    tar = tmp_path / "train-000000.tar"
    digest = hashlib.sha256(tar.read_bytes()).hexdigest()
    with open(tar, "rb") as f:
        probe = probe_of(f.fileno(), shards[0].bytes)
    assert shards == [ShardInfo("train-000000.tar", "train-000000.idx", 7, shards[0].bytes, digest, probe)]
    assert tar.stat().st_size == shards[0].bytes and shards[0].bytes % 10240 == 0
    assert sorted(p.name for p in tmp_path.iterdir()) == ["train-000000.idx", "train-000000.tar"]

    index = read_index(tmp_path / "train-000000.idx")
    assert [s.key for s in index] == [key for key, _ in samples]
    for (key, files), entry, (shard, offset, size) in zip(samples, index, places):
        assert entry.key == key and list(entry.members) == ["jpg", "cls"]
        assert (shard, offset, size) == (0, *entry.members["jpg"])
        for ext, data in files.items():
            assert read_member(tar, *entry.members[ext]) == data

    with tarfile.open(tar) as archive:
        members = archive.getmembers()
        assert [m.name for m in members] == [f"{k}.{e}" for k, files in samples for e in files]
        meta = {(m.mtime, m.uid, m.gid, m.uname, m.gname, m.mode, m.type) for m in members}
        assert meta == {(0, 0, 0, "", "", 0o644, tarfile.REGTYPE)}
        assert archive.extractfile(members[0]).read() == samples[0][1]["jpg"]


def test_rollover_on_max_samples(tmp_path: Path, samples) -> None:
    shards, places = write(tmp_path, samples, max_samples=3)
    assert [s.samples for s in shards] == [3, 3, 1]
    assert [s.name for s in shards] == [f"train-00000{i}.tar" for i in range(3)]
    assert [p[0] for p in places] == [0, 0, 0, 1, 1, 1, 2]
    for info in shards:
        assert (tmp_path / info.name).stat().st_size == info.bytes
        assert len(read_index(tmp_path / info.index)) == info.samples


def test_rollover_on_max_bytes(tmp_path: Path, samples) -> None:
    shards, _ = write(tmp_path, samples, max_bytes=10240)
    assert len(shards) > 1 and sum(s.samples for s in shards) == len(samples)
    assert all(s.bytes == 10240 == (tmp_path / s.name).stat().st_size for s in shards)
    # a sample larger than max_bytes still goes in, alone in its shard
    shards, _ = write(tmp_path / "tiny", samples, max_bytes=1)
    assert [s.samples for s in shards] == [1] * len(samples)


def test_deterministic(tmp_path: Path, samples) -> None:
    write(tmp_path / "a", samples, max_samples=4)
    write(tmp_path / "b", samples, max_samples=4)
    names = sorted(p.name for p in (tmp_path / "a").iterdir())
    assert names == sorted(p.name for p in (tmp_path / "b").iterdir()) and len(names) == 4
    for name in names:
        assert (tmp_path / "a" / name).read_bytes() == (tmp_path / "b" / name).read_bytes()


@pytest.mark.parametrize(
    "key", ["img.0001", "a/b.c", "", "dir/", "/abs/x", "a//b", "../x", "with space", "tab\tkey"]
)
def test_bad_key(tmp_path: Path, key: str) -> None:
    with ShardWriter(tmp_path, "train") as writer:
        with pytest.raises(OptionError, match="bad sample key"):
            writer.add(key, {"jpg": b"x"})
    assert list(tmp_path.iterdir()) == []


def test_bad_input(tmp_path: Path) -> None:
    with pytest.raises(OptionError):
        ShardWriter(tmp_path, "tr/ain")
    with pytest.raises(OptionError):
        ShardWriter(tmp_path, "train", max_samples=0)
    with ShardWriter(tmp_path, "train") as writer:
        for ext in ["JPG", "", "a/b"]:
            with pytest.raises(OptionError, match="bad extension"):
                writer.add("k", {ext: b"x"})
        with pytest.raises(OptionError, match="no files"):
            writer.add("k", {})
        with pytest.raises(OptionError, match="ustar"):
            writer.add("x" * 300, {"jpg": b"x"})
        writer.add("dir.v2/k", {"jpg": b"x"})  # dots in the folder part are fine
        with pytest.raises(OptionError, match="duplicate"):
            writer.add("dir.v2/k", {"jpg": b"y"})
    assert [s.key for s in read_index(tmp_path / "train-000000.idx")] == ["dir.v2/k"]


def test_no_complete_looking_shard_before_close_or_after_crash(tmp_path: Path, samples) -> None:
    with pytest.raises(RuntimeError):
        with ShardWriter(tmp_path, "train", max_samples=4) as writer:
            for key, files in samples[:6]:
                writer.add(key, files)
            assert not (tmp_path / "train-000001.tar").exists()
            assert (tmp_path / "train-000001.tar.partial").exists()
            raise RuntimeError("crash")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["train-000000.idx", "train-000000.tar"]
    assert ShardWriter(tmp_path / "empty", "train").close() == []


def test_read_index_errors(tmp_path: Path) -> None:
    bad = {
        "v1.1 1\njpg 512 3\n": "not a wds2idx",
        "v1.2 2\njpg 512 3 a.jpg\n": "header says 2",
        "v1.2 1\njpg 512 3\n": "line 2",
        "v1.2 1\njpg 513 3 a.jpg\n": "line 2",
        "v1.2 1\njpg 512 3 a.jpg cls 1024 1 b.cls\n": "different samples",
    }
    for text, message in bad.items():
        (tmp_path / "x.idx").write_text(text)
        with pytest.raises(DatasetError, match=message):
            read_index(tmp_path / "x.idx")
    (tmp_path / "x.tar").write_bytes(b"abc")
    with pytest.raises(DatasetError, match="truncated"):
        read_member(tmp_path / "x.tar", 0, 4)


def test_webdataset_reads_samples(tmp_path: Path, samples) -> None:
    webdataset = pytest.importorskip("webdataset")
    shards, _ = write(tmp_path, samples, max_samples=3)
    urls = [str(tmp_path / s.name) for s in shards]
    got = list(webdataset.WebDataset(urls, shardshuffle=False))
    assert [(s["__key__"], s["jpg"], s["cls"]) for s in got] == [
        (key, files["jpg"], files["cls"]) for key, files in samples
    ]


def test_matches_dali_wds2idx(tmp_path: Path, samples) -> None:
    wds2idx = pytest.importorskip("wds2idx")
    if shutil.which("tar") is None:  # without GNU tar, wds2idx falls back to slow tarfile code
        pytest.skip("GNU tar not found")
    shards, _ = write(tmp_path, samples, max_samples=4)
    assert len(shards) == 2
    for info in shards:
        ref = tmp_path / "ref.idx"
        with wds2idx.IndexCreator(str(tmp_path / info.name), str(ref), verbose=False) as creator:
            creator.create_index()
        assert ref.read_bytes() == (tmp_path / info.index).read_bytes()


@pytest.mark.dali
def test_dali_reads_shards_with_indexes(tmp_path: Path, samples) -> None:
    from nvidia.dali import fn, pipeline_def, types

    shards, _ = write(tmp_path, samples, max_samples=3)
    paths = [str(tmp_path / s.name) for s in shards]
    index_paths = [str(tmp_path / s.index) for s in shards]

    @pipeline_def(batch_size=len(samples), num_threads=1, device_id=None)
    def pipe():
        jpg, cls = fn.readers.webdataset(
            paths=paths, index_paths=index_paths, ext=["jpg", "cls"], random_shuffle=False,
            name="reader",
        )
        return fn.decoders.image(jpg, device="cpu", output_type=types.RGB), cls

    pipeline = pipe()
    pipeline.build()
    assert pipeline.epoch_size("reader") == len(samples)
    images, labels = pipeline.run()
    for i, (key, files) in enumerate(samples):
        width, height = Image.open(io.BytesIO(files["jpg"])).size
        assert images.at(i).shape == (height, width, 3)
        assert labels.at(i).tobytes() == files["cls"]  # .cls arrives as raw ASCII bytes (uint8)
        assert labels[i].source_info().endswith(f":{key}.cls")


@pytest.mark.parametrize("name, size", [
    ("0000001.jpg", 12345), ("a/b/c.cls", 1), ("x" * 100, 0), ("ü.jpg", 8**11 - 1), ("0000001.rgb", 196608),
    ("d" * 60 + "/" + "y" * 60, 7),  # over 100 bytes: ustar's prefix field holds the folder
])
def test_headers_are_those_tarfile_writes(name: str, size: int):
    """Each header is byte for byte what `tarfile` writes for the same member, and reads back as
    a regular file of that name and size, mode 0644, mtime 0, owned by root."""
    from iofeed.format.shards import _header

    info = tarfile.TarInfo(name)
    info.size, info.mtime, info.mode, info.uid, info.gid, info.uname, info.gname = size, 0, 0o644, 0, 0, "", ""
    header = _header(name, size)
    assert header == info.tobuf(tarfile.USTAR_FORMAT, "utf-8", "strict")
    parsed = tarfile.TarInfo.frombuf(header, "utf-8", "strict")  # checks the checksum too
    assert (parsed.name, parsed.size, parsed.mode, parsed.mtime, parsed.uid, parsed.gid, parsed.type) == (
        name, size, 0o644, 0, 0, 0, tarfile.REGTYPE)
