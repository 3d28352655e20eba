"""The autotuning policy on measured windows."""
from __future__ import annotations

import dataclasses

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


DECODE_SECONDS = 0.05  # virtual: one worker decodes a batch of 8 in this long (160 img/s)


class VirtualTime:
    """The autotuner's clock, run by the test instead of the machine: the consumer's work moves it
    (`consume`), and a batch it asks for arrives when a worker would have decoded it, each worker
    taking DECODE_SECONDS a batch. Real workers still decode and the engine really resizes; only
    the times it measures are these, so a loaded machine (slow workers, a slow test) changes
    nothing the autotuner sees."""

    def __init__(self, engine) -> None:
        self.now, self.ready, self.engine = 0.0, 0.0, engine
        receive = engine._group.receive  # the worker group the engine receives finished tasks from

        def received():
            done = receive()
            self.ready = max(self.ready, self.now - DECODE_SECONDS) + DECODE_SECONDS / engine.workers
            self.now = max(self.now, self.ready)  # the consumer waited for it, if it was not ready yet
            return dataclasses.replace(done, busy_seconds=DECODE_SECONDS)

        engine._group.receive = received
        engine.clock = lambda: self.now

    def consume(self, seconds: float) -> None:
        self.now += seconds


def _run(tree, seconds: float, consumer_seconds: float):
    """Batches taken for `seconds` of virtual time, each costing the consumer `consumer_seconds`:
    the engine's worker count, its settings in the stats, and its decisions."""
    import iofeed

    ld = iofeed.loader(tree, batch_size=8, workers=None, resources=iofeed.Resources(memory_budget=64 << 20))
    ld.engine.max_workers = 2  # the same ceiling on any machine
    with ld:
        time = VirtualTime(ld.engine)
        while time.now < seconds:
            for _ in ld:
                time.consume(consumer_seconds)
                if time.now >= seconds:
                    break
        return ld.engine.workers, ld.stats.settings, ld.engine.decisions


@pytest.mark.slow
def test_engine_grows_for_a_hungry_consumer_and_stays_small_for_a_slow_one(tmp_path):
    """A consumer that works 5 ms a batch (1,600 img/s) waits for every batch: the engine grows to its ceiling of 2,
    and the stats say so. One that works 0.2 s a batch (40 img/s, a quarter of a worker) never
    waits: it stays at 1. Times are virtual (`VirtualTime`), so a loaded machine cannot fail it."""
    from helpers.images import make_colour_tree

    tree = make_colour_tree(tmp_path / "t", per_class=30)
    workers, settings, decisions = _run(tree, seconds=4.0, consumer_seconds=0.005)
    assert workers == 2, decisions
    grown = [d for d in decisions if d["reason"].startswith("grow")]
    assert grown and grown[0]["workers"] == 2 and grown[0]["after_seconds"] >= 1.0, decisions
    # stats.settings follows the autotuner (it used to say workers 1, decisions [] for ever)
    tuned = [d for d in settings["decisions"] if isinstance(d, dict)]  # after the notes of what was chosen once
    assert settings["workers"] == 2 and tuned == decisions[-10:], settings
    workers, settings, decisions = _run(tree, seconds=4.0, consumer_seconds=0.2)
    assert workers == 1 and settings["workers"] == 1, decisions
    assert decisions and all(d["workers"] == 1 for d in decisions), decisions
    assert not any(d["reason"].startswith("grow") for d in decisions), decisions


def test_the_window_meter_reads_its_clock_not_the_machine_s():
    """The autotuner's windows are measured on the clock it is given (the engine's `clock`)."""
    from iofeed.engines.workers.autotune import WindowMeter

    now = [10.0]
    meter = WindowMeter(lambda: now[0])
    meter.add(8, 0.5, 0.25)
    now[0] = 12.0
    assert meter.elapsed() == 2.0
    assert meter.close(3) == Window(images=8, seconds=2.0, wait_seconds=0.5, busy_seconds=0.25, workers=3)
    assert meter.close(3).images == 0  # a new window began
