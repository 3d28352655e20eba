"""WebDataset tar shards as they come in the wild, read by `preprocess` and `iofeed index` alike:
damaged, v7 or compressed tars, members twice, keys split apart, two images in one sample,
sparse members, one shard named twice, brace patterns. Every image's pixels encode its label, so
each kept sample is checked end to end, and every sample written is kept or rejected by name."""
from __future__ import annotations

import contextlib
import gzip
import io
import json
import os
import tarfile
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from helpers.images import CLASS_COLOURS, jpeg_bytes, label_from_pixels, png_bytes
from iofeed.cli.main import main
from iofeed.errors import OptionError, SourceError
from iofeed.format.manifest import Manifest
from iofeed.format.shards import read_member
from iofeed.format.table import load_sources, load_table
from iofeed.prepare.index import index_shards
from iofeed.prepare.run import preprocess
from iofeed.prepare.sources.shardlist import expand_braces, list_shards

COMMANDS = ("preprocess", "index")


def colour_jpeg(label: int, seed: int) -> bytes:
    """A small JPEG whose colour is class `label`'s (`label_from_pixels` tells it back)."""
    rng = np.random.default_rng(seed)
    pixels = np.clip(np.array(CLASS_COLOURS[label]) + rng.integers(-10, 11, (28, 36, 3)), 0, 255)
    return jpeg_bytes(Image.fromarray(pixels.astype(np.uint8)))


def sample_members(i: int, label: int | None = None) -> list[tuple[str, bytes]]:
    """Sample `i`: `s{i:04d}.jpg` of its class's colour and `.cls` (class i % 4 unless given)."""
    label = i % 4 if label is None else label
    return [(f"s{i:04d}.jpg", colour_jpeg(label, i)), (f"s{i:04d}.cls", str(label).encode())]


def write_tar(path: Path, members: list[tuple[str, bytes]], fmt: int = tarfile.USTAR_FORMAT) -> Path:
    """A tar of `members` (name, bytes) in this order, as tarfile writes it."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with tarfile.open(path, "w", format=fmt) as tar:
        for name, data in members:
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return path


def samples(first: int, count: int) -> list[tuple[str, bytes]]:
    return [m for i in range(first, first + count) for m in sample_members(i)]


def headers(path: Path) -> dict[str, int]:
    """{member name: offset of its header}."""
    with tarfile.open(path) as tar:
        return {info.name: info.offset for info in tar}


def patch_header(path: Path, member: str, patch) -> None:
    """Rewrite the header of `member` with `patch(block: bytearray)`, its checksum made valid."""
    offset = headers(path)[member]
    data = bytearray(path.read_bytes())
    block = data[offset:offset + 512]
    patch(block)
    block[148:156] = b" " * 8
    block[148:156] = b"%06o\0 " % sum(block)
    data[offset:offset + 512] = block
    path.write_bytes(bytes(data))


def run(command: str, spec: str, out: Path, **options) -> Path:
    """`preprocess` (everything in train) or `index` of `spec` into `out`."""
    if command == "preprocess":
        preprocess(spec, out, progress=False, workers=1, val_fraction=0.0, **options)
    else:
        index_shards(spec, out, **options)
    return out


def kept(ds: Path) -> dict[str, int]:
    """{source name: label} of every sample stored, each checked against its pixels."""
    manifest = Manifest.read(ds)
    found = {}
    for info in manifest.splits.values():
        for row, name in zip(load_table(ds / info.table), load_sources(ds / info.table), strict=True):
            shard = info.shards[row["shard"]]
            data = read_member(Path(shard.get("url") or ds / shard["name"]), int(row["offset"]), int(row["size"]))
            label = int(manifest.classes[row["label"]])
            assert label_from_pixels(np.asarray(Image.open(io.BytesIO(data)).convert("RGB"))) == label, name
            assert name not in found, f"{name} twice"
            found[name] = label
    return found


def rejected(ds: Path) -> list[tuple[str, str]]:
    return [(r["path"], r["reason"]) for r in map(json.loads, (ds / "rejected.jsonl").read_text().splitlines())]


def keys(names) -> list[str]:
    return sorted(name.split("#")[-1] for name in names)


@pytest.mark.parametrize("command", COMMANDS)
@pytest.mark.parametrize("cut", ["inside an image", "before a header"])
def test_a_truncated_tar_is_rejected_with_every_sample_it_held_not_cut_short(tmp_path, command, cut):
    write_tar(tmp_path / "wds" / "a.tar", samples(0, 12))
    damaged = write_tar(tmp_path / "wds" / "b.tar", samples(12, 12))
    # in the 7th sample: its image cut short, or whole with its label's header and the rest gone
    cut = headers(damaged)["s0018.jpg"] + 700 if cut == "inside an image" else headers(damaged)["s0018.cls"]
    damaged.write_bytes(damaged.read_bytes()[:cut])
    ds = run(command, str(tmp_path / "wds"), tmp_path / "ds.iof")
    assert keys(kept(ds)) == [f"s{i:04d}" for i in range(12)], "the intact shard whole, nothing of the damaged one"
    gone = rejected(ds)
    assert keys(path for path, _ in gone) == [f"s{i:04d}" for i in range(12, 19)], "each sample it held, named"
    assert all(path.startswith(f"{damaged}#") and reason.startswith("damaged tar (truncated") and
               "its 7 samples are rejected with it" in reason for path, reason in gone)
    assert Manifest.read(ds).source["rejected_by_reason"] == {"damaged tar": 7}


@pytest.mark.parametrize("command", COMMANDS)
def test_a_bad_header_checksum_mid_shard_rejects_the_shard_with_all_its_samples(tmp_path, command):
    write_tar(tmp_path / "wds" / "a.tar", samples(0, 12))
    damaged = write_tar(tmp_path / "wds" / "b.tar", samples(12, 12))
    data = bytearray(damaged.read_bytes())
    data[headers(damaged)["s0015.jpg"] + 10] ^= 0x20  # one bit of a name: the checksum no longer matches
    damaged.write_bytes(bytes(data))
    ds = run(command, str(tmp_path / "wds"), tmp_path / "ds.iof")
    assert keys(kept(ds)) == [f"s{i:04d}" for i in range(12)]
    assert keys(path for path, _ in rejected(ds)) == [f"s{i:04d}" for i in range(12, 24)], "kept + rejected = written"
    assert all("unreadable header at byte" in reason for _, reason in rejected(ds))


@pytest.mark.parametrize("command", COMMANDS)
def test_duplicate_members_and_keys_repeated_apart_reject_every_copy(tmp_path, command):
    members = samples(0, 2)
    members += sample_members(2, label=1) + [("s0002.jpg", colour_jpeg(3, 99))]  # a second image, after its label
    members += samples(3, 3) + sample_members(3, label=2)  # s0003 again at the end
    shard = write_tar(tmp_path / "wds" / "a.tar", members)
    ds = run(command, str(shard), tmp_path / "ds.iof")
    assert keys(kept(ds)) == ["s0000", "s0001", "s0004", "s0005"]
    reasons = sorted((path.split("#")[1], reason.split(" (")[0]) for path, reason in rejected(ds))
    assert reasons == [("s0002", "duplicate member"), ("s0003", "key repeated apart"),
                       ("s0003", "key repeated apart")], "7 samples written: 4 kept + 3 rejected"


def v7(path: Path) -> Path:
    """`path` rewritten as a v7 tar (no ustar magic, owner names or prefix: as old tools write)."""
    for member in headers(path):
        patch_header(path, member, lambda block: block.__setitem__(slice(257, 512), bytes(255)))
    assert tarfile.open(path).getmembers()[0].name == "s0000.jpg" and path.read_bytes()[257:262] != b"ustar"
    return path


@pytest.mark.parametrize("command", COMMANDS)
def test_v7_and_compressed_tars_in_a_shard_folder_are_read_or_named(tmp_path, command):
    v7(write_tar(tmp_path / "wds" / "a.tar", samples(0, 6)))
    plain = write_tar(tmp_path / "b.tar", samples(6, 6))
    (tmp_path / "wds" / "b.tar.gz").write_bytes(gzip.compress(plain.read_bytes()))
    (tmp_path / "wds" / "notes.txt").write_text("how these shards were made\n")
    ds = run(command, str(tmp_path / "wds"), tmp_path / "ds.iof")
    gone = dict(rejected(ds))
    assert gone[str(tmp_path / "wds" / "notes.txt")].startswith("not a tar shard")
    if command == "preprocess":  # decompressed into the spool and read
        assert keys(kept(ds)) == [f"s{i:04d}" for i in range(12)] and len(gone) == 1
    else:  # the loader reads shards in place by offset: a compressed one is named, with its samples
        assert keys(kept(ds)) == [f"s{i:04d}" for i in range(6)]
        compressed = {path: reason for path, reason in gone.items() if path.endswith("notes.txt") is False}
        assert keys(compressed) == [f"s{i:04d}" for i in range(6, 12)]
        assert all(reason.startswith("compressed tar (gzip") for reason in compressed.values())
        assert [s["url"] for s in Manifest.read(ds).splits["train"].shards] == [str(tmp_path / "wds" / "a.tar")]


@pytest.mark.parametrize("command", COMMANDS)
def test_a_tar_beside_its_compressed_copy_is_refused_naming_both(tmp_path, command, capsys):
    """`b.tar` beside `b.tar.gz` (what `gzip -k` leaves) in a shard folder: preprocess read both, so
    each of b's samples was stored twice (index took the copy's samples for rejections). Refused
    naming both files; the glob the refusal suggests reads each sample once."""
    write_tar(tmp_path / "wds" / "a.tar", samples(0, 4))
    plain = write_tar(tmp_path / "wds" / "b.tar", samples(4, 4))
    (tmp_path / "wds" / "b.tar.gz").write_bytes(gzip.compress(plain.read_bytes()))
    out = tmp_path / "ds.iof"
    assert main([command, str(tmp_path / "wds"), "-o", str(out)]) != 0
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and f"{plain} and {plain}.gz look like two copies of one shard" in err[0], err
    assert not out.exists()
    ds = run(command, str(tmp_path / "wds" / "*.tar"), out)
    assert keys(kept(ds)) == [f"s{i:04d}" for i in range(8)] and rejected(ds) == []


def test_a_compressed_tar_past_the_spool_s_room_is_refused_leaving_no_partial_copy(tmp_path):
    """A gzip of zeros, a zip bomb in small (1 MiB of tar from 1 KiB): preprocess decompressed any
    compressed shard into its spool without a bound, so a bomb or a huge shard filled the disk.
    It stops at the spool disk's room (free space less a reserve; here injected), in one line
    naming the shard and the bound, and removes what it had written."""
    from iofeed.prepare.sources.spool import spool_room
    from iofeed.prepare.sources.tarread import read_shard

    plain = write_tar(tmp_path / "b.tar", [*samples(0, 2), ("s0002.bin", bytes(1 << 20))])
    bomb = tmp_path / "wds" / "b.tar.gz"
    bomb.parent.mkdir()
    bomb.write_bytes(gzip.compress(plain.read_bytes()))
    assert bomb.stat().st_size < 8 << 10
    spool = tmp_path / "spool"
    with pytest.raises(SourceError) as refused:
        read_shard(str(bomb), str(bomb), spool, room=512 << 10)
    assert "\n" not in str(refused.value) and str(refused.value).startswith(f"{bomb}: decompressed, it passes 524,288")
    assert list(spool.iterdir()) == []
    read = read_shard(str(bomb), str(bomb), spool, room=plain.stat().st_size)
    assert sorted(read.samples) == ["s0000", "s0001", "s0002"] and read.rejected == []
    assert Path(read.path).read_bytes() == plain.read_bytes()

    class Disk:
        free = 3 << 30

    Disk.free = 100 << 30
    assert spool_room(spool, lambda _: Disk()) == 95 << 30  # 100 GiB free less the 5% reserve
    Disk.free = 5 << 30
    assert spool_room(spool, lambda _: Disk()) == 3 << 30  # 5 GiB free less the 2 GiB reserve
    Disk.free = 1 << 30  # a small disk: the reserve is at most half of it, the copy may take the rest
    assert spool_room(spool, lambda _: Disk()) == 512 << 20
    Disk.free = 0
    assert spool_room(spool, lambda _: Disk()) == 0


def test_a_small_compressed_tar_is_read_on_a_disk_with_little_free_space(tmp_path, monkeypatch, capsys):
    """A 12-sample .tar.gz (tens of KB unpacked) on a disk with 300 MB free was refused ("it passes
    0 bytes"): a fixed 2 GiB reserve took the whole disk. The plain .tar was read there. The
    reserve is sized by the copy now, and a copy too large for the disk is still refused."""
    import shutil as shutil_module
    from types import SimpleNamespace

    plain = write_tar(tmp_path / "wds" / "a.tar", samples(0, 12))
    packed = tmp_path / "gz" / "a.tar.gz"
    packed.parent.mkdir()
    packed.write_bytes(gzip.compress(plain.read_bytes()))
    real = shutil_module.disk_usage
    free = {"bytes": 300 << 20}
    monkeypatch.setattr(shutil_module, "disk_usage",
                        lambda path: SimpleNamespace(**{**real(path)._asdict(), "free": free["bytes"]}))
    ds = run("preprocess", str(packed), tmp_path / "gz.iof")
    assert keys(kept(ds)) == [f"s{i:04d}" for i in range(12)] and rejected(ds) == []
    free["bytes"] = plain.stat().st_size  # the copy would leave nothing for the dataset: refused by name
    assert main(["preprocess", str(packed), "-o", str(tmp_path / "full.iof")]) != 0
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and f"{packed}: decompressed, it passes" in err[0], err


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs Linux's /dev/full, a disk always full")
def test_a_full_disk_refusing_only_the_buffered_tail_is_said_as_the_disk_s_failure(tmp_path):
    """Pieces smaller than the write buffer (a decompressed stream's last ones) reach the disk only
    when the file is flushed: a full disk then raised a bare OSError past the spool's own message
    (for a download: taken for the storage's error, the shard rejected as unreadable)."""
    from iofeed.prepare.sources.spool import copy_within

    (tmp_path / "spool").mkdir()
    full = tmp_path / "spool" / "000000.tar"
    full.symlink_to("/dev/full")  # writes fail with ENOSPC; removing the link leaves the device be
    with pytest.raises(SourceError) as refused:
        copy_within([b"x" * 100, b"y" * 100], full, 1 << 20, "s3://bucket/a.tar", "downloaded")
    assert str(refused.value).startswith(f"s3://bucket/a.tar: writing it downloaded beside the output in {tmp_path} "
                                         "failed after 200 bytes (No space left on device)")
    assert "\n" not in str(refused.value) and not os.path.lexists(full), "the partial copy removed"


@pytest.mark.storage
def test_a_remote_shard_past_the_spool_s_room_is_refused_leaving_no_partial_copy(tmp_path, monkeypatch):
    """The same bound for a shard downloaded into the spool (preprocess and index of URLs): it was
    copied whole, however large."""
    from iofeed.prepare.sources.shardlist import fetch

    shard = write_tar(tmp_path / "wds" / "big.tar", [*samples(0, 2), ("s0002.bin", bytes(1 << 20))])
    spool = tmp_path / "spool"
    with served(tmp_path / "wds", "http", monkeypatch) as url:
        with pytest.raises(SourceError) as refused:
            fetch(f"{url}/big.tar", spool, room=512 << 10)
        assert str(refused.value).startswith(f"{url}/big.tar: downloaded, it passes 524,288 bytes")
        assert list(spool.iterdir()) == []
        copy = fetch(f"{url}/big.tar", spool, room=shard.stat().st_size)
    assert copy.read_bytes() == shard.read_bytes()


@pytest.mark.parametrize("command", COMMANDS)
def test_a_sample_with_two_images_is_rejected_naming_them_unless_image_key_chooses(tmp_path, command):
    mask = png_bytes(Image.new("RGB", (36, 28), CLASS_COLOURS[3]))
    members = samples(0, 2) + [("s0002.png", mask)] + sample_members(2, label=1)
    shard = write_tar(tmp_path / "a.tar", members)
    ds = run(command, str(shard), tmp_path / "ds.iof")
    assert keys(kept(ds)) == ["s0000", "s0001"]
    assert rejected(ds) == [(f"{shard}#s0002", "several images (png, jpg: choose one with --image-key, "
                                               "e.g. --image-key jpg)")]
    chosen = tmp_path / "chosen.iof"
    extra = ["--workers", "1", "--val-fraction", "0"] if command == "preprocess" else []
    assert main([command, str(shard), "-o", str(chosen), "--image-key", "webp,jpg", *extra]) == 0
    assert kept(chosen) == {f"{shard}#s0000": 0, f"{shard}#s0001": 1, f"{shard}#s0002": 1}, "the jpg, its label"
    with pytest.raises(OptionError, match="--image-key 'cls'"):
        run(command, str(shard), tmp_path / "bad.iof", image_key="cls")


def test_image_key_is_refused_for_a_source_without_members(tmp_path):
    from helpers.images import make_colour_tree

    with pytest.raises(SourceError, match="--image-key is for WebDataset shards, not a folder source"):
        run("preprocess", str(make_colour_tree(tmp_path / "tree", per_class=1)), tmp_path / "ds.iof", image_key="jpg")


@pytest.mark.parametrize("command", COMMANDS)
def test_one_shard_named_twice_is_refused(tmp_path, command):
    write_tar(tmp_path / "wds" / "shard-000000.tar", samples(0, 2))
    with pytest.raises(SourceError, match=r"names the shard .*shard-000000.tar twice: name each shard once"):
        run(command, str(tmp_path / "wds" / "shard-{000000,000000}.tar"), tmp_path / "ds.iof")
    os.symlink("shard-000000.tar", tmp_path / "wds" / "shard-000001.tar")
    with pytest.raises(SourceError, match=r"twice \(as .*shard-000000.tar and .*shard-000001.tar\)"):
        run(command, str(tmp_path / "wds"), tmp_path / "ds.iof")
    (tmp_path / "wds" / "shard-000001.tar").unlink()
    os.link(tmp_path / "wds" / "shard-000000.tar", tmp_path / "wds" / "shard-000002.tar")
    with pytest.raises(SourceError, match=r"twice \(as .*shard-000000.tar and .*shard-000002.tar\)"):
        run(command, str(tmp_path / "wds" / "shard-*.tar"), tmp_path / "ds.iof")


def sparse(path: Path, member: str) -> None:
    """Make `member` a GNU sparse file: its stored bytes one region at 4096 of a larger file."""
    def patch(block: bytearray) -> None:
        size = tarfile.nti(bytes(block[124:136]))
        block[156:157] = b"S"
        block[386:410] = b"%011o\0%011o\0" % (4096, size)  # one region: (offset, stored bytes)
        block[483:495] = b"%011o\0" % (4096 + size)  # the file's real size
    patch_header(path, member, patch)


@pytest.mark.parametrize("command", COMMANDS)
def test_a_sparse_member_is_rejected_by_name_and_the_rest_loads(tmp_path, command):
    shard = write_tar(tmp_path / "a.tar", samples(0, 4), fmt=tarfile.GNU_FORMAT)
    sparse(shard, "s0002.jpg")
    assert tarfile.open(shard).getmember("s0002.jpg").issparse()
    ds = run(command, str(shard), tmp_path / "ds.iof")
    assert keys(kept(ds)) == ["s0000", "s0001", "s0003"]
    assert [(p, r.split(" (")[0]) for p, r in rejected(ds)] == [(f"{shard}#s0002", "sparse member")]
    import iofeed

    with iofeed.loader(str(ds), batch_size=1, image_size=16, workers=1, framework="numpy") as ld:
        labels = [int(label[0]) for _, label in ld]
    assert sorted(labels) == [0, 1, 3]


def test_brace_patterns_naming_too_many_shards_are_refused_before_expanding():
    with pytest.raises(SourceError, match=r"names more than 1,000,000 shards"):
        expand_braces("shard-{000000..100000000}.tar")
    with pytest.raises(SourceError, match=r"names more than 1,000,000 shards"):
        expand_braces("s{0..999}-{0..9999}.tar")  # each group small, together too many


def test_nested_or_unbalanced_braces_are_refused_and_plain_groups_multiply():
    with pytest.raises(SourceError, match=r"nested braces in 's\{a,\{b,c\}\}.tar' are not supported"):
        expand_braces("s{a,{b,c}}.tar")
    with pytest.raises(SourceError, match="unbalanced braces"):
        expand_braces("s{000..003.tar")
    for pattern in ("s{a..e}.tar", "s{0..10..2}.tar", "s{-1..3}.tar"):
        with pytest.raises(SourceError, match=r"unsupported range .*: ranges are \{LOW..HIGH\} of whole numbers"):
            expand_braces(pattern)
    assert expand_braces("s{007..010}-{a,b}") == ["s007-a", "s007-b", "s008-a", "s008-b", "s009-a", "s009-b",
                                                  "s010-a", "s010-b"]


def test_a_huge_brace_range_is_one_line_from_the_command(tmp_path, capsys):
    assert main(["index", str(tmp_path / "shard-{000000..100000000}.tar"), "-o", str(tmp_path / "ds.iof")]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "names more than 1,000,000 shards" in err


def test_a_folder_lists_every_file_for_the_reader_to_name(tmp_path):
    write_tar(tmp_path / "wds" / "a.tar", samples(0, 1))
    (tmp_path / "wds" / "a.idx").write_text("v1.2 1\n")
    assert list_shards(str(tmp_path / "wds")) == [str(tmp_path / "wds" / "a.idx"), str(tmp_path / "wds" / "a.tar")]


@contextlib.contextmanager
def served(folder: Path, store: str, monkeypatch) -> Iterator[str]:
    """The files of `folder` at a URL: an http server, or a bucket of moto's S3, on 127.0.0.1."""
    if store == "http":
        from helpers.storage import CountingServer

        server = CountingServer(folder)
        try:
            yield server.url
        finally:
            server.close()
        return
    from helpers.storage import moto_bucket

    with moto_bucket(monkeypatch) as (fs, url):
        for path in folder.iterdir():
            fs.put_file(str(path), f"{url}/{path.name}")
        yield url


@pytest.mark.storage
@pytest.mark.parametrize("command", COMMANDS)
@pytest.mark.parametrize("store", ["http", pytest.param("s3", marks=pytest.mark.slow)])
def test_a_damaged_remote_shard_is_a_rejection_named_by_its_url(tmp_path, monkeypatch, command, store):
    write_tar(tmp_path / "wds" / "shard-000000.tar", samples(0, 4))
    damaged = write_tar(tmp_path / "wds" / "shard-000001.tar", samples(4, 4))
    damaged.write_bytes(damaged.read_bytes()[:headers(damaged)["s0006.jpg"] + 600])
    with served(tmp_path / "wds", store, monkeypatch) as url:
        ds = run(command, f"{url}/shard-{{000000..000001}}.tar", tmp_path / "ds.iof")
    if command == "preprocess":
        assert keys(kept(ds)) == ["s0000", "s0001", "s0002", "s0003"]
    else:
        assert keys(load_sources(ds / Manifest.read(ds).splits["train"].table)) == ["s0000", "s0001", "s0002", "s0003"]
    assert [path for path, _ in rejected(ds)] == [f"{url}/shard-000001.tar#s{i:04d}" for i in range(4, 7)]
    assert all(reason.startswith("damaged tar (truncated") for _, reason in rejected(ds))


@pytest.mark.parametrize("command", COMMANDS)
def test_tars_joined_by_cat_and_link_members_are_named_not_half_read(tmp_path, command):
    first, second = write_tar(tmp_path / "a.tar", samples(0, 2)), write_tar(tmp_path / "b.tar", samples(2, 2))
    joined = tmp_path / "wds" / "joined.tar"
    joined.parent.mkdir()
    joined.write_bytes(first.read_bytes() + second.read_bytes())  # tarfile, GNU tar and webdataset stop at the first
    linked = write_tar(tmp_path / "wds" / "linked.tar", samples(4, 2))
    with tarfile.open(linked, "a") as tar:
        info = tarfile.TarInfo("s0006.jpg")
        info.type, info.linkname = tarfile.SYMTYPE, "s0004.jpg"
        tar.addfile(info)
        cls = tarfile.TarInfo("s0006.cls")
        cls.size = 1
        tar.addfile(cls, io.BytesIO(b"2"))
    ds = run(command, str(tmp_path / "wds"), tmp_path / "ds.iof")
    assert keys(kept(ds)) == ["s0004", "s0005"]
    gone = {path.split("/")[-1]: reason for path, reason in rejected(ds)}
    assert sorted(gone) == ["joined.tar#s0000", "joined.tar#s0001", "joined.tar#s0002", "joined.tar#s0003",
                            "linked.tar#s0006"], "all 4 of the joined tars, the second's too"
    assert all("data after its end-of-archive marker" in gone[f"joined.tar#s{i:04d}"] for i in range(4))
    assert gone["linked.tar#s0006"].startswith("link or special member (s0006.jpg")


@pytest.mark.storage
@pytest.mark.parametrize("command", COMMANDS)
def test_a_remote_shard_denied_is_a_named_rejection_and_a_missing_one_says_not_found(tmp_path, command):
    from helpers.storage import CountingServer

    for s in range(3):
        write_tar(tmp_path / "wds" / f"shard-{s:06d}.tar", samples(4 * s, 4))
    server = CountingServer(tmp_path / "wds")
    server.fail_status, server.failing["/shard-000001.tar"] = 403, 100
    try:
        ds = run(command, f"{server.url}/shard-{{000000..000002}}.tar", tmp_path / "ds.iof")
        (tmp_path / "wds" / "shard-000002.tar").unlink()
        with pytest.raises(SourceError, match=r"shard not found: .*/shard-000002.tar \(not found \(HTTP 404\)\)"):
            run(command, f"{server.url}/shard-{{000000..000002}}.tar", tmp_path / "gone.iof")
    finally:
        server.close()
    names = load_sources(ds / Manifest.read(ds).splits["train"].table)
    assert keys(names) == [f"s{i:04d}" for i in (0, 1, 2, 3, 8, 9, 10, 11)]
    assert rejected(ds) == [(f"{server.url}/shard-000001.tar", "unreadable shard (access denied (HTTP 403); its "
                                                               "samples could not be counted)")]


@pytest.mark.parametrize("command", COMMANDS)
def test_a_broken_link_in_a_shard_folder_is_named_and_a_glob_matching_nothing_refused(tmp_path, command):
    write_tar(tmp_path / "wds" / "a.tar", samples(0, 2))
    os.symlink("gone.tar", tmp_path / "wds" / "b.tar")
    ds = run(command, str(tmp_path / "wds"), tmp_path / "ds.iof")
    assert keys(kept(ds)) == ["s0000", "s0001"]
    assert rejected(ds) == [(str(tmp_path / "wds" / "b.tar"), "unreadable shard (No such file or directory); "
                                                             "no sample could be read from it")]
    with pytest.raises(SourceError, match=r"no file matches .*/other/\*.tar"):
        run(command, str(tmp_path / "{wds/a.tar,other/*.tar}"), tmp_path / "none.iof")


def test_a_cut_compressed_tar_is_a_damaged_tar_with_the_samples_it_held(tmp_path):
    write_tar(tmp_path / "wds" / "a.tar", samples(0, 2))
    plain = write_tar(tmp_path / "b.tar", samples(2, 6))
    packed = gzip.compress(plain.read_bytes())
    (tmp_path / "wds" / "b.tar.gz").write_bytes(packed[:len(packed) // 2])
    ds = run("preprocess", str(tmp_path / "wds"), tmp_path / "ds.iof")
    assert keys(kept(ds)) == ["s0000", "s0001"]
    gone = rejected(ds)
    assert gone and all(path.startswith(f"{tmp_path / 'wds' / 'b.tar.gz'}#") for path, _ in gone)
    assert all(reason.startswith("damaged tar (truncated") and f"its {len(gone)} samples" in reason
               for _, reason in gone)


@pytest.mark.parametrize("command", COMMANDS)
def test_a_member_name_that_is_not_utf8_is_named_not_a_traceback(tmp_path, command):
    shard = tmp_path / "a.tar"
    with tarfile.open(shard, "w", format=tarfile.GNU_FORMAT, encoding="utf-8", errors="surrogateescape") as tar:
        for name, data in samples(0, 2) + [(n.replace("s0002", "s\udcff02"), d) for n, d in sample_members(2)]:
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    ds = run(command, str(shard), tmp_path / "ds.iof")
    if command == "index":  # a wds2idx line is UTF-8 text: the loader could not be told where it is
        assert keys(kept(ds)) == ["s0000", "s0001"]
        assert rejected(ds) == [(f"{shard}#s\\xff02", "member name not UTF-8 (a DALI index cannot hold it)")]
    else:  # preprocess writes its own shards and names: the sample is kept, its source name escaped
        assert len(kept(ds)) == 3 and not rejected(ds)


@pytest.mark.slow  # importing webdataset takes most of it
@pytest.mark.parametrize("command", COMMANDS)
def test_a_key_tar_writer_wrote_twice_rejects_both_samples_not_the_first(tmp_path, command):
    import webdataset as wds

    shard = tmp_path / "shard-000000.tar"
    with wds.TarWriter(str(shard)) as sink:
        for i in (0, 1, 2, 3):
            sink.write({"__key__": f"s{i:04d}", "jpg": colour_jpeg(i % 4, i), "cls": i % 4})
        sink.write({"__key__": "s0001", "jpg": colour_jpeg(2, 50), "cls": 2})  # the same key again, at the end
    ds = run(command, str(shard), tmp_path / "ds.iof")
    assert keys(kept(ds)) == ["s0000", "s0002", "s0003"]
    assert [(p, r.split(" (")[0]) for p, r in rejected(ds)] == [(f"{shard}#s0001", "key repeated apart")] * 2
