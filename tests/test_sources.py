"""Preprocess from every source kind: WebDataset shards (local and over HTTP), Parquet, a saved
Hugging Face dataset, labels files (multi-label CSV, ImageNet-style validation lists)."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from helpers.sources import close_to, read_dataset, write_webdataset
from iofeed.errors import SourceError
from iofeed.format.manifest import Manifest
from iofeed.prepare.run import preprocess
from iofeed.prepare.sources.base import SourceOptions
from iofeed.prepare.sources.registry import detect
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


def test_brace_lists_expand_like_shell_ranges():
    assert expand_braces("s-{008..011}.tar") == ["s-008.tar", "s-009.tar", "s-010.tar", "s-011.tar"]
    assert expand_braces("{a,b}/x{1..2}") == ["a/x1", "a/x2", "b/x1", "b/x2"]
    with pytest.raises(SourceError, match="empty range"):
        expand_braces("x{3..1}")


def test_webdataset_written_by_webdataset_is_read_with_every_image_kind_and_label(tmp_path):
    expected = write_webdataset(tmp_path / "wds")
    summary = preprocess(str(tmp_path / "wds" / "shard-{000000..000001}.tar"), tmp_path / "out.iof",
                         progress=False, workers=1)
    manifest = Manifest.read(summary.out)
    assert manifest.source["kind"] == "webdataset"
    assert manifest.classes == ["0", "1", "2", "name1", "name3"]
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
