"""The bench's catalogue is declared by what each feed runs: every line opens (a batch comes out) or
is refused naming what this machine lacks, and an iofeed line's loader runs with exactly the
keywords its line declares (read back from `loader.stats.settings`)."""
from __future__ import annotations

import json
from contextlib import ExitStack
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from iofeed.cli.bench.feeds import FEEDS, FeedSpec, open_feed, unmet
from iofeed.cli.bench.sources import SOURCES
from iofeed.errors import FeedUnavailable
from iofeed.loading.stats import json_value
from iofeed.options.loader_options import recorded

SIZE, BATCH, CLASSES = 32, 4, 4
# what a line's source form and recipe add to its loader keywords (docs/benchmarks.md)
SOURCE_KEYWORDS = {"": set(), "mixed views": set(), "S3 cold": {"cache.dir", "cache.limit", "order.block_shards"},
                   "S3 warm": {"cache.dir", "cache.limit"}}
RECIPE_KEYWORDS = {"": set(), "reference": {"transform", "batch_transform"}}


def _lines(kind: str | None = None, served: bool = False) -> list:
    """Every line (of `kind`), with the markers of what it runs on: torch for the torch feeds, the
    DataLoader's torchvision, and (`served`: when the test serves it) moto's S3 for a served source."""
    params = []
    for name, entry in FEEDS:
        decl = entry.caps
        if kind is not None and decl.kind != kind:
            continue
        marks = {"torch"} if decl.framework == "torch" or decl.kind in ("torchvision", "synthetic") else set()
        marks |= {"torchvision"} if decl.kind == "torchvision" or decl.recipe else set()
        marks |= {"storage"} if served and SOURCES[decl.source].served else set()
        params.append(pytest.param(name, marks=[getattr(pytest.mark, m) for m in sorted(marks)], id=name))
    return params


@pytest.fixture(scope="module")
def forms(colour_tree, colour_dataset, tmp_path_factory) -> dict[str, str]:
    """The folder, the JPEG dataset and a raw-pixel dataset of the same 40 images; for the detection
    lines (`coco-` forms), a COCO stand-in folder and its dataset."""
    from iofeed.prepare.run import ImagePolicy, preprocess
    from iofeed.prepare.synth_coco import synth_coco

    raw = tmp_path_factory.mktemp("feeds-raw") / "colour.raw.iof"
    preprocess(colour_tree, raw, policy=ImagePolicy(format="raw"), val_per_class=2, shard_bytes=1 << 16,
               progress=False, workers=1)
    coco = tmp_path_factory.mktemp("feeds-coco")
    synth_coco(coco / "coco", images=10, seed=1)
    preprocess(coco / "coco", coco / "coco.iof", val_fraction=0.0, progress=False, workers=1)
    return {"folder": str(colour_tree), "dataset": str(colour_dataset), "raw": str(raw), "": "",
            "coco-folder": str(coco / "coco"), "coco-dataset": str(coco / "coco.iof")}


def _form(name: str, forms: dict[str, str]) -> str:
    """The path of the form line `name` reads (a detection line: the COCO stand-in's)."""
    decl = FEEDS.caps(name)
    return forms[("coco-" if decl.task == "detection" else "") + decl.reads]


def _first_batch(feed: Any) -> tuple[Any, Any]:
    """The first batch `feed` delivers; the feed is closed after it."""
    try:
        stream = feed.batches()
        images, labels = next(stream)
        stream.close()
    finally:
        feed.close()
    return images, labels


def _spec(name: str, forms: dict[str, str]) -> FeedSpec:
    return FeedSpec(name, _form(name, forms), 1, BATCH, SIZE, "cpu", classes=CLASSES)


@pytest.mark.slow
@pytest.mark.parametrize("name", _lines())
def test_every_line_opens_and_delivers_or_is_refused_naming_what_it_lacks(name, forms):
    decl, spec = FEEDS.caps(name), _spec(name, forms)
    lacking = unmet(decl, "cpu")
    if lacking is None and SOURCES[decl.source].served:
        lacking = "local S3 endpoint"  # only `iofeed bench` starts it
    try:
        feed = open_feed(spec)
    except FeedUnavailable as exc:
        assert lacking is not None and lacking in str(exc), (name, str(exc))
        return
    assert lacking is None, f"{name} opened without {lacking}"
    images, labels = _first_batch(feed)
    assert images.shape[0] == len(labels) == BATCH
    assert tuple(images.shape[1:]) in ((3, SIZE, SIZE), (SIZE, SIZE, 3))  # torch's NCHW, the others' NHWC


@pytest.mark.slow
@pytest.mark.parametrize("name", _lines("iofeed", served=True))
def test_an_iofeed_line_runs_the_loader_with_exactly_its_keywords(name, forms, tmp_path):
    """What the loader reports it was asked for is the line's keywords, the run's and those its
    source form and recipe add, and nothing else: every other option is a plain loader's."""
    import iofeed

    decl = FEEDS.caps(name)
    if unmet(decl, "cpu") is not None:
        pytest.skip(unmet(decl, "cpu"))  # a GPU, or a module, missing here
    feed_class = FEEDS[name].load()
    with ExitStack() as stack:
        spec = _spec(name, forms)
        if SOURCES[decl.source].served:
            from iofeed.cli.bench.stream import LocalEndpoint

            endpoint = LocalEndpoint(Path(spec.source), tmp_path)
            stack.callback(endpoint.close)
            spec = replace(spec, source=endpoint.url, endpoint=endpoint.endpoint, cache_root=str(endpoint.cache_root))
        feed = feed_class(spec)
        stack.callback(feed.close)
        plain = iofeed.loader(_form(name, forms), **feed_class.run_keywords(spec))
        stack.callback(getattr(plain, "iofeed_loader", plain).close)
        fed = feed.loader.stats.settings["options"]
        json.dumps(feed.loader.stats.as_dict())  # the stats file and the bench's record take it as it is
        given = getattr(plain, "iofeed_loader", plain).stats.settings["options"]
        plain_engine = getattr(plain, "iofeed_loader", plain).stats.settings["engine"]
    run = feed_class.run_keywords(spec)
    asked = recorded({**decl.keywords, **run})  # an option object's fields by `keyword.field`, as stats say
    assert {key: fed[key] for key in asked} == {key: json_value(value) for key, value in asked.items()}, name
    changed = {key for key in fed if fed[key] != given[key]}
    added = SOURCE_KEYWORDS[decl.source] | RECIPE_KEYWORDS[decl.recipe]
    assert changed - added == {key for key, value in recorded(decl.keywords).items() if json_value(value) != given[key]}
    assert added <= changed, f"{name}: {sorted(added - changed)} not given to the loader"
    assert feed.settings["engine"] == decl.keywords.get("engine", plain_engine), "the line's engine, else auto's"


@pytest.mark.torch
def test_the_bench_runs_a_line_per_torch_layout_by_default(colour_dataset):
    """The default layout's cost shows in a default run (issue 42): the contiguous NCHW default beside
    channels_last, each line's tensors in its layout."""
    import torch

    from iofeed.cli.bench.feeds import DEFAULT_FEEDS

    assert {"iofeed-dataset", "iofeed-nchw"} <= set(DEFAULT_FEEDS)
    for name, layout in (("iofeed-dataset", torch.channels_last), ("iofeed-nchw", torch.contiguous_format)):
        images, labels = _first_batch(open_feed(FeedSpec(name, str(colour_dataset), 1, BATCH, SIZE, "cpu",
                                                         classes=CLASSES)))
        assert images.shape == (BATCH, 3, SIZE, SIZE) and len(labels) == BATCH
        assert images.is_contiguous(memory_format=layout) and not images.is_contiguous(
            memory_format=torch.contiguous_format if layout == torch.channels_last else torch.channels_last), name
