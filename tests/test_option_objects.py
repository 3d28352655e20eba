"""The grouped options (`iofeed.Order`, `Resources`, `Cache`, `Skips`): each checks itself in one
line and prints what differs from its default; the flat keywords mean the same thing, are refused
when they contradict their object, and an unknown keyword names the close matches;
`LoaderOptions` carries them and runs no user code."""
from __future__ import annotations

import pickle

import numpy as np
import pytest

import iofeed
from helpers import transforms as T
from helpers.images import label_from_pixels
from helpers.runs import slot_memory
from iofeed import Cache, Order, Resources, Skips
from iofeed.errors import OptionError
from iofeed.options.loader_options import LoaderOptions

SMALL = {"batch_size": 4, "image_size": 32}

BAD = [
    (lambda: Order(shuffle="sideways"), "Order.shuffle='sideways' is not one of none, global, block"),
    (lambda: Order(seed=-1), "Order.seed must be >= 0, got -1"),
    (lambda: Order(seed=1.5), "Order.seed must be an int, got 1.5 (float)"),
    (lambda: Order(drop_last="yes"), "Order.drop_last must be True or False (or None), got 'yes'"),
    (lambda: Order(block_shards=0), "Order.block_shards must be >= 1, got 0"),
    (lambda: Resources(workers=0), "Resources.workers must be >= 1, got 0"),
    (lambda: Resources(prefetch=True), "Resources.prefetch must be an int or None, got True (bool)"),
    (lambda: Resources(memory_budget=1e9), "Resources.memory_budget must be an int or None, got 1000000000.0"),
    (lambda: Cache(dir=3), "Cache.dir must be a folder path or None, got 3 (int)"),
    (lambda: Cache(limit=0), "Cache.limit must be >= 1, got 0"),
    (lambda: Skips(on_error="ignore"), "Skips.on_error='ignore' is not one of skip, raise"),
    (lambda: Skips(max_skipped=2), "max_skipped must be a fraction of the epoch's samples between 0 and 1"),
    (lambda: LoaderOptions(4, order=Resources()), "order= takes an iofeed.Order(...), got Resources() (Resources)"),
]


@pytest.mark.parametrize("make, message", BAD, ids=[m for _, m in BAD])
def test_each_object_refuses_a_bad_field_in_one_line_naming_it(make, message):
    with pytest.raises(OptionError) as info:
        make()
    assert message in str(info.value) and "\n" not in str(info.value)


def test_an_object_prints_only_what_differs_from_its_default():
    assert repr(Order()) == "Order()" and repr(Skips()) == "Skips()"
    assert repr(Order(seed=3, shuffle="block")) == "Order(shuffle='block', seed=3)"
    assert repr(Resources(workers=np.int64(2))) == "Resources(workers=2)", "numpy integers are kept as int"
    assert repr(Cache(limit=1 << 30)) == "Cache(limit=1073741824)"
    assert repr(Skips(max_skipped=None)) == "Skips(max_skipped=None)"
    assert repr(Order(drop_last=False)) == "Order(drop_last=False)", "False is not the default None"
    assert Order(seed=3) == Order(seed=3) and hash(Order(seed=3)) == hash(Order(seed=3))


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


def test_flat_keywords_and_objects_give_identical_batches(colour_dataset):
    flat = _epoch(source=colour_dataset, seed=3, shuffle=True, drop_last=False, workers=1, prefetch=2,
                  on_error="raise", max_skipped=0.5)
    grouped = _epoch(source=colour_dataset, order=Order(seed=3, shuffle=True, drop_last=False),
                     resources=Resources(workers=1, prefetch=2), skips=Skips(on_error="raise", max_skipped=0.5))
    other_seed = _epoch(source=colour_dataset, order=Order(seed=4, drop_last=False), resources=Resources(workers=1))
    (images, labels, indices, options, asked), (g_images, g_labels, g_indices, g_options, g_asked) = flat, grouped
    assert len(images) == 8 and sum(map(len, labels)) == 32, "the whole train split, the last batch kept"
    assert options.order == g_options.order == Order(seed=3, shuffle=True, drop_last=False)
    assert options.resources == g_options.resources and options.skips == g_options.skips == Skips("raise", 0.5)
    assert asked == g_asked and asked["seed"] == 3 and asked["workers"] == 1, "recorded by loader() keyword"
    assert asked["cache_dir"] is None and "order" not in asked and "shuffle" in asked
    assert set(asked) == {*options.keywords()} and not set(asked) & {"order", "resources", "cache", "skips"}
    for a, b in zip(images, g_images, strict=True):
        assert np.array_equal(a, b)
    for a, b, batch in zip(labels, g_labels, images, strict=True):
        assert np.array_equal(a, b) and [label_from_pixels(image) for image in batch] == a.tolist()
    assert [i.tolist() for i in indices] == [i.tolist() for i in g_indices]
    assert sorted(np.concatenate(indices).tolist()) == sorted(np.concatenate(other_seed[2]).tolist())
    assert np.concatenate(indices).tolist() != np.concatenate(other_seed[2]).tolist(), "the seed was used"


@pytest.mark.parametrize("options, named", [
    ({"order": Order(seed=1), "seed": 2}, "seed=2 and order=Order(seed=1) both set Order.seed"),
    ({"resources": Resources(workers=2), "workers": 1}, "workers=1 and resources=Resources(workers=2)"),
    ({"cache": Cache(limit=10), "cache_limit": 20}, "cache_limit=20 and cache=Cache(limit=10) both set Cache.limit"),
    ({"skips": Skips(on_error="raise"), "on_error": "skip"}, "on_error='skip' and skips=Skips(on_error='raise')"),
    # passed at the default is passed: equal to Order(), but the caller set the seed to 0
    ({"order": Order(seed=0), "seed": 5}, "seed=5 and order=Order() both set Order.seed, to different values (5 and 0"),
    ({"skips": Skips("skip"), "on_error": "raise"}, "on_error='raise' and skips=Skips() both set Skips.on_error"),
])
def test_a_flat_keyword_that_disagrees_with_its_object_is_refused_naming_both(colour_dataset, options, named):
    before = slot_memory()
    with pytest.raises(OptionError) as info:
        iofeed.loader(colour_dataset, **SMALL, **options)
    assert named in str(info.value) and "pass one of them" in str(info.value) and "\n" not in str(info.value)
    assert slot_memory() == before


def test_a_flat_keyword_fills_a_field_its_object_was_not_given(colour_dataset):
    with iofeed.loader(colour_dataset, **SMALL, order=Order(shuffle="none", drop_last=None), seed=5, drop_last=False,
                       workers=1) as ld:
        assert ld.options.order == Order(shuffle="none", seed=5, drop_last=False)
        assert ld.options.resources == Resources(workers=1), "None where None is the default is not set"
        assert ld.order.seed == 5 and ld.order.shuffle == "none" and not ld.order.drop_last


def test_an_object_knows_which_fields_were_passed_also_after_pickling():
    """What tells `Order(seed=0)` (the seed set) from `Order()`, which are equal, also in a copy."""
    assert Order(seed=0) == Order() and Order().passed == frozenset()
    assert Order(seed=0).passed == {"seed"} and Order("none", 0).passed == {"shuffle", "seed"}
    assert Skips(max_skipped=None).passed == {"max_skipped"}, "None is not Skips.max_skipped's default"
    assert Resources(workers=None, prefetch=2).passed == {"prefetch"}
    copied = pickle.loads(pickle.dumps(Order(seed=0)))
    assert copied == Order(seed=0) and copied.passed == {"seed"}


@pytest.mark.parametrize("asked, split, shuffle, drop_last", [
    ({"shuffle": True}, "train", "global", True), ({}, "val", "none", False),
    ({"order": Order(shuffle=False, drop_last=False)}, "train", "none", False)])
def test_settings_record_the_order_as_resolved_beside_what_was_asked(colour_dataset, asked, split, shuffle, drop_last):
    """`settings["options"]` keeps `shuffle=True` (or None) as asked; which order that became (a
    local dataset's "global", a streamed one's "block") and the drop_last a split implies were in
    no setting."""
    with iofeed.loader(colour_dataset, **SMALL, split=split, workers=1, **asked) as ld:
        settings = ld.stats.settings
    assert (settings["shuffle"], settings["drop_last"]) == (shuffle, drop_last)
    assert settings["options"]["shuffle"] == ld.options.order.shuffle


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
    """Given, they are fixed; not given, `placement()` follows the environment (and a process group
    started later), and the order of the epoch takes them from there."""
    monkeypatch.delenv("RANK", raising=False)
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    following = LoaderOptions(batch_size=2)
    assert following.follows_group and following.placement() == (0, 1)
    monkeypatch.setenv("RANK", "1")
    monkeypatch.setenv("WORLD_SIZE", "2")
    assert following.placement() == (1, 2) and following.order_spec(8).rank == 1
    fixed = LoaderOptions(batch_size=2, rank=0, world_size=4)
    assert not fixed.follows_group and fixed.placement() == (0, 4) and fixed.order_spec(8).world_size == 4
