"""The autotuning policy on measured windows."""
from __future__ import annotations

import pytest

from iofeed.engines.workers.autotune import Window, decide


def test_grows_when_starved_to_cover_the_consumer():
    # consumer works 2.0 s of 4 s for 2000 images (1000 img/s); one worker: 2000 img / 4 s busy = 500 img/s
    d = decide(Window(images=2000, seconds=4.0, wait_seconds=2.0, busy_seconds=4.0, workers=1), max_workers=8)
    assert d.workers == 3 and d.reason.startswith("grow")


def test_never_beyond_the_maximum():
    d = decide(Window(images=2000, seconds=4.0, wait_seconds=2.0, busy_seconds=4.0, workers=2), max_workers=2)
    assert d.workers == 2 and "maximum" in d.reason


def test_shrinks_one_at_a_time_when_over_provisioned():
    # consumer 500 img/s, never waits; a worker decodes 1000 img/s; 4 workers are too many
    d = decide(Window(images=1000, seconds=2.0, wait_seconds=0.0, busy_seconds=1.0, workers=4), max_workers=8)
    assert d.workers == 3 and d.reason.startswith("shrink")


def test_keeps_a_good_setting_and_waits_for_data():
    d = decide(Window(images=1000, seconds=2.0, wait_seconds=0.01, busy_seconds=2.0, workers=2), max_workers=8)
    assert d.workers == 2 and d.reason.startswith("keep")
    assert decide(Window(0, 1.0, 1.0, 0.0, 1), 8).workers == 1


def _run(tree, seconds: float, sleep_per_batch: float):
    import time

    import iofeed

    ld = iofeed.loader(tree, batch_size=8, workers=None, memory_budget=64 << 20)
    ld.backend.max_workers = 2  # the same ceiling on any machine
    with ld:
        end = None  # the clock starts at the first batch: a cold worker start-up is not tuning time
        while end is None or time.monotonic() < end:
            for _ in ld:
                end = end or time.monotonic() + seconds
                time.sleep(sleep_per_batch)
                if time.monotonic() > end:
                    break
        return ld.backend.workers, ld.stats.settings, ld.backend.decisions


@pytest.mark.slow
def test_engine_grows_for_a_hungry_consumer_and_stays_small_for_a_slow_one(tmp_path):
    from helpers.images import make_colour_tree

    tree = make_colour_tree(tmp_path / "t", per_class=30)
    workers, settings, decisions = _run(tree, seconds=4.0, sleep_per_batch=0.0)
    assert workers == 2, decisions
    grown = [d for d in decisions if d["reason"].startswith("grow")]
    assert grown and grown[0]["workers"] == 2 and grown[0]["after_seconds"] > 0, decisions
    # stats.settings follows the autotuner (it used to say workers 1, decisions [] for ever)
    assert settings["workers"] == 2 and settings["decisions"] == decisions[-10:], settings
    workers, settings, decisions = _run(tree, seconds=3.0, sleep_per_batch=0.2)
    assert workers == 1 and settings["workers"] == 1, decisions
    assert decisions and all(d["workers"] == 1 for d in decisions), decisions
