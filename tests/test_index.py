"""`iofeed index`: WebDataset shards written by the `webdataset` library, read in place by the
loader with global shuffle, equal batches per rank, exact resume, and by DALI."""
from __future__ import annotations

import hashlib
import json
from collections import Counter
from pathlib import Path

import numpy as np
import pytest

import iofeed
from helpers.sources import write_webdataset
from iofeed.cli.main import main
from iofeed.errors import OptionError, SourceError
from iofeed.format.manifest import Manifest
from iofeed.format.table import load_sources
from iofeed.prepare.index import index_shards


@pytest.fixture(scope="module")
def indexed(tmp_path_factory) -> tuple[Path, Path, dict]:
    """3 shards of 7 good samples (one shard also holding a sample without a label, one without an
    image and one truncated JPEG), indexed in place."""
    root = tmp_path_factory.mktemp("indexed")
    expected = write_webdataset(root / "wds", shards=3, per_shard=7)
    digests = {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in (root / "wds").iterdir()}
    assert main(["index", str(root / "wds" / "shard-{000000..000002}.tar"), "-o", str(root / "ds.iof")]) == 0
    assert digests == {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in (root / "wds").iterdir()}
    return root / "ds.iof", root / "wds", expected


def _names(ds: Path) -> list[str]:
    return load_sources(ds / Manifest.read(ds).splits["train"].table)


def _epoch(ld) -> list[tuple[list[int], list[int]]]:
    return [(ld.last_indices.tolist(), np.asarray(labels).tolist()) for _, labels in ld]


def test_index_lists_the_shards_in_place_with_dali_indexes(indexed):
    ds, wds, expected = indexed
    manifest = Manifest.read(ds)
    shards = manifest.splits["train"].shards
    assert [s["url"] for s in shards] == [str(wds / f"shard-{n:06d}.tar") for n in range(3)]
    assert not list(ds.glob("*.tar")), "nothing rewritten"
    names = _names(ds)
    assert set(names) == set(expected) | {f"{wds / 'shard-000002.tar'}#broken"}
    rejected = [json.loads(line)["path"] for line in (ds / "rejected.jsonl").read_text().splitlines()]
    assert sorted(rejected) == sorted(f"{wds / 'shard-000002.tar'}#{k}" for k in ("noimage", "nolabel"))
    first = (ds / "shard-000000.idx").read_text().splitlines()
    assert first[0] == "v1.2 7" and first[1].split()[0] in ("cls", "jpg")


def test_loader_yields_exactly_the_shards_samples_in_a_global_shuffle_on_three_ranks(indexed):
    ds, _, expected = indexed
    manifest, names = Manifest.read(ds), _names(ds)
    per_rank, skipped = [], Counter()
    for rank in range(3):
        with iofeed.loader(str(ds), batch_size=2, image_size=24, workers=1,
                           placement=iofeed.Placement(rank=rank, world_size=3), skips=iofeed.Skips(max_skipped=0.5),
                           drop_last=False) as ld:  # 1 broken of 11: past the 5% default
            per_rank.append(_epoch(ld))
            skipped += ld.stats.skipped
    assert skipped == {"corrupt or truncated image": 1}, "the truncated JPEG is skipped and counted"
    assert len({len(b) for b in per_rank}) == 1, "equal batches per rank"
    seen = [i for batches in per_rank for indices, _ in batches for i in indices]
    broken = names.index(next(n for n in names if n.endswith("#broken")))
    assert sorted(set(seen)) == sorted(set(range(len(names))) - {broken}), "every good sample, the broken skipped"
    for batches in per_rank:
        for indices, labels in batches:
            for i, label in zip(indices, labels, strict=True):
                source_label = expected[names[i]][1]
                assert manifest.classes[label] == str(source_label)
    order = [i for indices, _ in per_rank[0] for i in indices]
    assert order != sorted(order), "shuffled"


def test_resume_mid_epoch_is_exact(indexed):
    ds, _, _ = indexed
    with iofeed.loader(str(ds), batch_size=3, image_size=24, workers=1, seed=5) as ld:
        full = [(ld.last_indices.tolist(), images.copy()) for images, _ in ld]
    with iofeed.loader(str(ds), batch_size=3, image_size=24, workers=1, seed=5) as ld:
        it = iter(ld)
        next(it), next(it)
        state = ld.state_dict()
    with iofeed.loader(str(ds), batch_size=3, image_size=24, workers=2, seed=5) as ld:
        ld.load_state_dict(state)
        rest = [(ld.last_indices.tolist(), images.copy()) for images, _ in ld]
    assert len(rest) == len(full) - 2
    for (a, x), (b, y) in zip(full[2:], rest, strict=True):
        assert a == b and np.array_equal(x, y)


def test_verify_finds_the_undecodable_image_ahead(indexed, capsys):
    ds, wds, _ = indexed
    assert main(["inspect", "--verify", str(ds)]) == 1
    err = capsys.readouterr().err
    assert "1 problem" in err and str(wds / "shard-000002.tar") in err and "truncated" in err


@pytest.mark.dali
def test_dali_reads_the_same_shards(indexed):
    from nvidia.dali import fn, pipeline_def

    ds, wds, expected = indexed
    with iofeed.loader(str(ds), batch_size=3, image_size=24, workers=1, engine="dali", seed=1) as dali, \
            iofeed.loader(str(ds), batch_size=3, image_size=24, workers=1, engine="workers", seed=1) as workers:
        assert _epoch(dali) == _epoch(workers)
    manifest = Manifest.read(ds)
    tars = [s["url"] for s in manifest.splits["train"].shards]
    indexes = [str(ds / s["index"]) for s in manifest.splits["train"].shards]

    @pipeline_def(batch_size=4, num_threads=1, device_id=None)
    def plain():
        return fn.readers.webdataset(paths=tars, index_paths=indexes, ext=["cls"],
                                     missing_component_behavior="skip", name="reader")

    pipe = plain()
    pipe.build()
    with_cls = sum(1 for name in expected if int(name.rsplit("#s", 1)[1]) % 2 == 0)  # write_webdataset's even samples
    assert pipe.epoch_size("reader") == with_cls + 2


@pytest.mark.storage
def test_index_of_shards_over_http_streams_them_through_the_node_cache(tmp_path):
    from helpers.storage import CountingServer

    write_webdataset(tmp_path / "wds", shards=2, per_shard=5)
    server = CountingServer(tmp_path / "wds")
    try:
        url = f"{server.url}/shard-{{000000..000001}}.tar"
        assert main(["index", url, "-o", str(tmp_path / "ds.iof")]) == 0
        shards = Manifest.read(tmp_path / "ds.iof").splits["train"].shards
        assert [s["url"] for s in shards] == [f"{server.url}/shard-00000{n}.tar" for n in range(2)]
        assert all(len(s["sha256"]) == 64 for s in shards)
        with iofeed.loader(str(tmp_path / "ds.iof"), batch_size=2, image_size=24, workers=1, drop_last=False,
                           cache=iofeed.Cache(dir=tmp_path / "cache"),
                           skips=iofeed.Skips(on_error="skip", max_skipped=0.5)) as ld:
            seen = sorted(i for indices, _ in _epoch(ld) for i in indices)
            assert ld.stats.fetched["shards"] == 2
    finally:
        server.close()
    broken = _names(tmp_path / "ds.iof").index(next(n for n in _names(tmp_path / "ds.iof") if n.endswith("#broken")))
    assert sorted(set(seen)) == sorted(set(range(11)) - {broken}) and len(seen) == 11, "a spare in its place"


def test_inspect_says_the_images_are_as_they_came(indexed, capsys):
    ds, _, _ = indexed
    assert main(["inspect", str(ds)]) == 0
    out = capsys.readouterr().out
    assert "indexed in place" in out and "targets       class, with extras" in out and "None" not in out


def test_local_shards_and_urls_together_are_refused_when_indexing(tmp_path):
    """The loader reads an index of one kind only: refused here, not after a dataset is written."""
    (tmp_path / "a.tar").write_bytes(b"")
    spec = f"{{{tmp_path / 'a.tar'},http://127.0.0.1:9/b.tar}}"  # refused before anything is fetched
    with pytest.raises(SourceError, match=r"names local shards \(.*a\.tar\) and URLs \(http://127\.0\.0\.1:9/b\.tar\)"):
        index_shards(spec, tmp_path / "ds.iof")
    assert not (tmp_path / "ds.iof").exists()


@pytest.mark.parametrize("split", ["../escape", "a/b", ""])
def test_a_split_that_is_not_a_plain_name_is_refused(tmp_path, split):
    with pytest.raises(OptionError, match="a split is a plain name"):
        index_shards(str(tmp_path / "none.tar"), tmp_path / "ds.iof", split=split)
    assert not list(tmp_path.iterdir())
