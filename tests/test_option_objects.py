"""The option objects (`iofeed.Placement`, `Output`, `Order`, `Resources`, `Cache`, `Skips`): each
checks itself in one line and prints what differs from its default; every setting has one
spelling, and each earlier one (a flat keyword, a field that moved to a loader() keyword) is
refused in one line naming it; an unknown keyword names the close matches; the signature stays
small; `LoaderOptions` carries them and runs no user code."""
from __future__ import annotations

import inspect

import numpy as np
import pytest

import iofeed
from helpers import transforms as T
from helpers.images import label_from_pixels
from helpers.runs import slot_memory
from iofeed import Cache, Order, Output, Placement, Resources, Skips
from iofeed.errors import OptionError
from iofeed.options.loader_options import LoaderOptions
from iofeed.options.spellings import RENAMED

SMALL = {"batch_size": 4, "image_size": 32}

BAD = [
    (lambda: Placement(rank=1), "Placement.rank=1 was given without world_size"),
    (lambda: Placement(rank=2, world_size=2), "Placement.rank=2 is outside 0..1"),
    (lambda: Placement(world_size=0, rank=0), "Placement.world_size must be >= 1, got 0"),
    (lambda: Output(memory_format="nhwc"), "Output.memory_format='nhwc' is not one of contiguous, channels_last"),
    (lambda: Output(target="soft"), "Output.target='soft' is not one of class, multi_hot"),
    (lambda: Output(extras="yes"), "Output.extras must be True or False, got 'yes'"),
    (lambda: Order(block_shards=0), "Order.block_shards must be >= 1, got 0"),
    (lambda: Resources(prefetch=True), "Resources.prefetch must be an int or None, got True (bool)"),
    (lambda: Resources(memory_budget=1e9), "Resources.memory_budget must be an int or None, got 1000000000.0"),
    (lambda: Cache(dir=3), "Cache.dir must be a folder path or None, got 3 (int)"),
    (lambda: Cache(limit=0), "Cache.limit must be >= 1, got 0"),
    (lambda: Skips(on_error="ignore"), "Skips.on_error='ignore' is not one of skip, raise"),
    (lambda: Skips(max_skipped=2), "Skips.max_skipped must be a fraction of the epoch's samples between 0 and 1"),
    (lambda: LoaderOptions(4, order=Resources()), "order= takes an iofeed.Order(...), got Resources() (Resources)"),
]


@pytest.mark.parametrize("make, message", BAD, ids=[m for _, m in BAD])
def test_each_object_refuses_a_bad_field_in_one_line_naming_it(make, message):
    with pytest.raises(OptionError) as info:
        make()
    assert message in str(info.value) and "\n" not in str(info.value)


def test_an_object_prints_only_what_differs_from_its_default():
    assert repr(Order()) == "Order()" and repr(Skips()) == "Skips()" and repr(Placement()) == "Placement()"
    assert repr(Order(block_shards=3)) == "Order(block_shards=3)"
    assert repr(Resources(prefetch=np.int64(2))) == "Resources(prefetch=2)", "numpy integers are kept as int"
    assert repr(Cache(limit=1 << 30)) == "Cache(limit=1073741824)"
    assert repr(Skips(max_skipped=None)) == "Skips(max_skipped=None)"
    assert repr(Output(extras=True, target="multi_hot")) == "Output(target='multi_hot', extras=True)"
    assert repr(Placement(rank=0, world_size=2)) == "Placement(rank=0, world_size=2)"
    assert Order(block_shards=3) == Order(block_shards=3) and hash(Order(block_shards=3)) == hash(Order(block_shards=3))


def test_fields_are_passed_by_name():
    """`Order(8)` would mean a different field than it did when shuffle came first: names only."""
    with pytest.raises(TypeError):
        Order(8)  # type: ignore[misc]


def _epoch(**options) -> tuple[list[np.ndarray], list[np.ndarray], list[np.ndarray], LoaderOptions, dict]:
    """Images, labels and sample indices of one epoch of the colour dataset's train split, the
    loader's options and what its stats say it was asked for."""
    images, labels, indices = [], [], []
    with iofeed.loader(options.pop("source"), **SMALL, **options) as ld:
        for batch_images, batch_labels in ld:
            images.append(batch_images.copy())
            labels.append(batch_labels.copy())
            indices.append(ld.last_indices.copy())
        return images, labels, indices, ld.options, ld.stats.settings["options"]


def test_the_objects_reach_the_loader_and_its_stats(colour_dataset):
    grouped = _epoch(source=colour_dataset, seed=3, shuffle=True, drop_last=False, workers=1,
                     resources=Resources(prefetch=2), skips=Skips(on_error="raise", max_skipped=0.5),
                     placement=Placement(rank=0, world_size=1), order=Order(block_shards=2))
    other_seed = _epoch(source=colour_dataset, seed=4, drop_last=False, workers=1)
    images, labels, indices, options, asked = grouped
    assert len(images) == 8 and sum(map(len, labels)) == 32, "the whole train split, the last batch kept"
    assert options.resources == Resources(prefetch=2) and options.skips == Skips(on_error="raise", max_skipped=0.5)
    assert (options.seed, options.shuffle, options.drop_last, options.workers) == (3, True, False, 1)
    assert asked["seed"] == 3 and asked["workers"] == 1 and asked["resources.prefetch"] == 2, "by loader() keyword"
    assert asked["order.block_shards"] == 2 and asked["placement.world_size"] == 1 and asked["cache.dir"] is None
    assert set(asked) == {*options.keywords()} and not set(asked) & {"order", "resources", "cache", "skips"}
    for batch_labels, batch in zip(labels, images, strict=True):
        assert [label_from_pixels(image) for image in batch] == batch_labels.tolist()
    assert sorted(np.concatenate(indices).tolist()) == sorted(np.concatenate(other_seed[2]).tolist())
    assert np.concatenate(indices).tolist() != np.concatenate(other_seed[2]).tolist(), "the seed was used"


# each earlier flat spelling, a value for it, and the one spelling it has now
EARLIER = [
    ("backend", "dali", "engine='dali'"),
    ("device", "cpu", "placement=iofeed.Placement(device='cpu')"),
    ("rank", 0, "placement=iofeed.Placement(rank=0)"),
    ("world_size", 2, "placement=iofeed.Placement(world_size=2)"),
    ("sharding", None, "placement=iofeed.Placement(sharding=None)"),
    ("pixels", "0-1", "output=iofeed.Output(pixels='0-1')"),
    ("dtype", "float32", "output=iofeed.Output(dtype='float32')"),
    ("memory_format", "channels_last", "output=iofeed.Output(memory_format='channels_last')"),
    ("target", "multi_hot", "output=iofeed.Output(target='multi_hot')"),
    ("extras", True, "output=iofeed.Output(extras=True)"),
    ("block_shards", 2, "order=iofeed.Order(block_shards=2)"),
    ("prefetch", 2, "resources=iofeed.Resources(prefetch=2)"),
    ("memory_budget", 1 << 30, "resources=iofeed.Resources(memory_budget=1073741824)"),
    ("cache_dir", "/tmp/c", "cache=iofeed.Cache(dir='/tmp/c')"),
    ("cache_limit", 1 << 30, "cache=iofeed.Cache(limit=1073741824)"),
    ("on_error", "raise", "skips=iofeed.Skips(on_error='raise')"),
    ("max_skipped", None, "skips=iofeed.Skips(max_skipped=None)"),
]


def test_every_earlier_spelling_is_listed_here():
    assert {name for name, _, _ in EARLIER} == set(RENAMED)


@pytest.mark.parametrize("old, value, now", EARLIER, ids=[name for name, _, _ in EARLIER])
def test_an_earlier_spelling_is_refused_in_one_line_naming_the_one_it_has_now(colour_dataset, old, value, now):
    before = slot_memory()
    with pytest.raises(OptionError) as info:
        iofeed.loader(colour_dataset, **SMALL, **{old: value})
    message = str(info.value)
    assert message.startswith(f"loader({old}={value!r}): that is spelled {now} now") and "\n" not in message
    assert slot_memory() == before, "refused before any work"


def test_earlier_spellings_together_are_named_together_by_their_object(colour_dataset):
    with pytest.raises(OptionError) as info:
        iofeed.loader(colour_dataset, **SMALL, on_error="raise", device="cpu", max_skipped=0.5)
    assert ("those are spelled skips=iofeed.Skips(on_error='raise', max_skipped=0.5), "
            "placement=iofeed.Placement(device='cpu') now") in str(info.value)


@pytest.mark.parametrize("kind, field, value", [(Order, "shuffle", True), (Order, "seed", 3),
                                                (Order, "drop_last", False), (Resources, "workers", 2)])
def test_a_field_that_became_a_loader_keyword_is_refused_naming_it(kind, field, value):
    with pytest.raises(OptionError) as info:
        kind(**{field: value})
    message = str(info.value)
    assert message == (f"{kind.__name__}({field}={value!r}): {field} is a loader() keyword, as in torch's "
                       f"DataLoader: pass iofeed.loader(..., {field}={value!r})")


def test_the_signature_is_small_and_shows_no_catch_all():
    parameters = inspect.signature(iofeed.loader).parameters
    assert len(parameters) <= 20, list(parameters)
    assert not any(p.kind in (p.VAR_KEYWORD, p.VAR_POSITIONAL) for p in parameters.values())
    assert {"batch_size", "shuffle", "drop_last", "workers", "seed"} <= set(parameters), "DataLoader's, flat"
    assert not set(parameters) & set(RENAMED), "no setting has two spellings"


@pytest.mark.parametrize("asked, split, shuffle, drop_last", [
    ({"shuffle": True}, "train", "global", True), ({}, "val", "none", False),
    ({"shuffle": False, "drop_last": False}, "train", "none", False)])
def test_settings_record_the_order_as_resolved_beside_what_was_asked(colour_dataset, asked, split, shuffle, drop_last):
    """`settings["options"]` keeps `shuffle=True` (or None) as asked; which order that became (a
    local dataset's "global", a streamed one's "block") and the drop_last a split implies were in
    no setting."""
    with iofeed.loader(colour_dataset, **SMALL, split=split, workers=1, **asked) as ld:
        settings = ld.stats.settings
    assert (settings["shuffle"], settings["drop_last"]) == (shuffle, drop_last)
    assert settings["options"]["shuffle"] == ld.options.shuffle


@pytest.mark.parametrize("keyword, close", [("sed", "seed"), ("num_workers", "workers"), ("shufle", "shuffle"),
                                            ("image_szie", "image_size")])
def test_an_unknown_keyword_is_refused_naming_the_close_matches(colour_dataset, keyword, close):
    with pytest.raises(OptionError) as info:
        iofeed.loader(colour_dataset, **SMALL, **{keyword: 1})
    message = str(info.value)
    assert f"unknown keyword {keyword}=1" in message and f"did you mean {close}" in message and "\n" not in message


def test_building_the_options_runs_no_user_code(colour_dataset, tmp_path):
    """`LoaderOptions` used to probe `transform=` on an image while validating: user code ran in
    `__post_init__`. The workers engine probes it now, when the loader is made."""
    LoaderOptions(batch_size=4, image_size=32, transform=T.Recording(str(tmp_path)))
    assert list(tmp_path.iterdir()) == []
    with iofeed.loader(colour_dataset, **SMALL, workers=1, transform=T.Recording(str(tmp_path))) as ld:
        probed = len(list(tmp_path.iterdir()))
        assert probed >= 1, "the engine probed it"
        next(iter(ld))
    assert len(list(tmp_path.iterdir())) >= probed + 4, "and the workers ran it on the batch"
    before = slot_memory()
    with pytest.raises(OptionError, match=r"^transform=helpers\.transforms\.chw returned CHW \(3, 32, 32\) for a "
                                          r"32x32x3 uint8 image: return HWC \(32, 32, 3\)"):
        iofeed.loader(colour_dataset, **SMALL, workers=1, transform=T.chw)
    assert slot_memory() == before


def test_rank_and_world_size_come_from_one_place(monkeypatch):
    """Given, they are fixed; not given, `rank_and_world_size()` follows the environment (and a process group
    started later), and the order of the epoch takes them from there."""
    monkeypatch.delenv("RANK", raising=False)
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    following = LoaderOptions(batch_size=2)
    assert following.follows_group and following.rank_and_world_size() == (0, 1)
    monkeypatch.setenv("RANK", "1")
    monkeypatch.setenv("WORLD_SIZE", "2")
    assert following.rank_and_world_size() == (1, 2) and following.order_spec(8).rank == 1
    fixed = LoaderOptions(batch_size=2, placement=Placement(rank=0, world_size=4))
    assert not fixed.follows_group and fixed.rank_and_world_size() == (0, 4) and fixed.order_spec(8).world_size == 4
