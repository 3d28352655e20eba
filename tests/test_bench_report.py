"""The bench's table and PNG from made-up measurements (issue 29): a disturbed run is said on the
picture, page cache is labelled as such, the recipe feeds are compared with each other, and the
legend names only baselines it draws."""
from __future__ import annotations

import pytest

from iofeed.cli.bench.feeds import FeedSpec
from iofeed.cli.bench.host import Tally
from iofeed.cli.bench.measure import CpuUse, FeedRun, Window
from iofeed.cli.bench.report import build_record, feed_records, table
from iofeed.cli.bench.schema import validate

MIB = 2**20


def _run(name: str, images_per_window: list[int], other_share: float = 0.0, memory: int = 300 * MIB,
         file_bytes: int | None = 10 * MIB) -> FeedRun:
    """A feed measured in one-second windows of `images_per_window` images each, other processes
    taking `other_share` of the 2-core machine."""
    run = FeedRun(FeedSpec(name, "data", 2, 8, 32, "cpu"), capacity=4)
    for number, images in enumerate(images_per_window):
        cpu = CpuUse([1.0, 1.0], [1.0, 1.0], feed=1.0, other=2 * other_share)
        run.windows.append(Window(number, Tally(8, 1, 0.01), Tally(images, images // 8, 1.0), cpu))
    run.peak_memory_bytes, run.peak_file_bytes, run.processes = memory, file_bytes, 3
    return run


def _record(runs: list[FeedRun]) -> dict:
    record = build_record(
        created="2026-11-26T07:00:00+00:00", complete=True, command="iofeed bench", page_cache={
            "state": "warm", "files": 1, "bytes": 1, "seconds": 0.1},
        machine={"cpu_model": "test CPU", "cores": 2, "ram_bytes": 1 << 30, "os": "Linux", "gpu": None,
                 "versions": dict.fromkeys(("python", "torch", "torchvision", "pillow", "libjpeg_turbo", "numpy",
                                            "dali", "iofeed"))},
        settings={"batch_size": 8, "image_size": 32, "model": "none", "device": "cpu", "seconds_per_feed": 2.0,
                  "rounds": 2, "window_seconds": 1.0, "warmup_seconds": 0.0, "workers": 2, "seed": 0,
                  "memory_metric": "pss"},
        inputs={"folder": None, "dataset": "data", "missing": {}, "notes": []},
        baseline="torchvision-Nw", feeds=feed_records(runs, 32), gpu_timeline=[])
    assert validate(record) == []
    return record


def _texts(record: dict) -> list[str]:
    from matplotlib.text import Text

    from iofeed.cli.bench.plot import draw

    figure = draw(record)
    figure.canvas.draw()
    return [t.get_text() for t in figure.findobj(Text)]


def test_the_recipe_feeds_are_compared_with_each_other_not_with_a_dash() -> None:
    """`--feeds torchvision-recipe,iofeed-recipe` printed "—" for both ratios, and the PNG's legend
    named torchvision-Nw, which it did not draw."""
    record = _record([_run("torchvision-recipe", [400, 400]), _run("iofeed-recipe", [1000, 1000])])
    ratios = {f["name"]: (f["baseline"], f["vs_baseline"]) for f in record["feeds"]}
    assert ratios == {"torchvision-recipe": ("torchvision-recipe", 1.0), "iofeed-recipe": ("torchvision-recipe", 2.5)}
    text = table(record)
    row = next(line for line in text.splitlines() if line.startswith("iofeed-recipe"))
    assert "2.50" in row and "—" not in row, text
    assert "over torchvision-recipe's (the recipe feeds)" in text and "torchvision-Nw" not in text, text
    pytest.importorskip("matplotlib")
    texts = _texts(record)
    assert any(t.startswith("1,000   2.50x torchvision-recipe   windows") for t in texts), texts
    legend = next(t for t in texts if t.startswith("images/sec"))
    assert "orange: the baseline (torchvision-recipe)" in legend and "torchvision-Nw" not in legend, legend


def test_plain_and_recipe_feeds_each_have_their_baseline_and_a_missing_one_is_not_named() -> None:
    record = _record([_run("torchvision-Nw", [500, 500]), _run("iofeed-dataset", [1500, 1500]),
                      _run("iofeed-recipe", [900, 900])])
    ratios = {f["name"]: f["vs_baseline"] for f in record["feeds"]}
    assert ratios == {"torchvision-Nw": 1.0, "iofeed-dataset": 3.0, "iofeed-recipe": None}
    pytest.importorskip("matplotlib")
    legend = next(t for t in _texts(record) if t.startswith("images/sec"))
    assert "orange: the baseline (torchvision-Nw)" in legend and "recipe" not in legend, legend


def test_a_disturbed_run_is_said_on_the_picture_as_in_the_table() -> None:
    """The table said other processes took 50-68% of the machine; the PNG said nothing."""
    record = _record([_run("torchvision-Nw", [500, 500], other_share=0.68), _run("iofeed-dataset", [1500, 1500],
                                                                                 other_share=0.5)])
    assert "other processes took up to 68% of the machine in 4 of the 4 timed windows" in table(record)
    pytest.importorskip("matplotlib")
    title = next(t for t in _texts(record) if t.startswith("iofeed bench"))
    assert "Disturbed run: other processes took up to 68% of the machine in 4 of the 4 timed windows" in title
    quiet = _record([_run("torchvision-Nw", [500, 500], other_share=0.02)])
    assert "isturbed" not in table(quiet)
    assert not any("isturbed" in t for t in _texts(quiet))


def test_the_raw_feeds_memory_is_labelled_as_page_cache() -> None:
    """The raw feed's 5.6 GB "memory" bar is its mapped shards in the page cache, and was not labelled."""
    record = _record([_run("iofeed-dataset", [500, 500]),
                      _run("iofeed-raw", [900, 900], memory=5583 * MIB, file_bytes=5400 * MIB)])
    pytest.importorskip("matplotlib")
    texts = _texts(record)
    assert "5,583 (5,400 of it page cache: mapped files)" in texts, texts
    assert "300" in texts, "a feed whose memory is its own keeps a plain label"
    old = _record([_run("iofeed-raw", [900, 900], memory=5583 * MIB, file_bytes=None)])  # no kernel figure
    assert "5,583 (mostly page cache: the mapped raw shards)" in _texts(old)


COLD_REASON = ("cannot stream cold: the smallest cache that streams holds 10 shards (40 MiB), and the whole split "
               "is 3 shards (12 MiB), so each shard would be fetched once; preprocess with --shard-mb 4 for a "
               "dataset that streams")


def test_a_feed_that_did_not_run_has_its_whole_reason_on_the_picture() -> None:
    """The PNG cut iofeed-s3-cold's reason at 110 characters, before what to do (`--shard-mb 4`)."""
    cold = _run("iofeed-s3-cold", [])
    cold.stop("skipped", COLD_REASON)
    record = _record([_run("torchvision-Nw", [500, 500]), cold])
    pytest.importorskip("matplotlib")
    texts = _texts(record)
    assert "skipped: see (1) below" in texts, texts
    (note,) = [t for t in texts if t.startswith("(1) iofeed-s3-cold skipped:")]
    assert " ".join(note.split()) == f"(1) iofeed-s3-cold skipped: {COLD_REASON}"


def test_the_picture_shows_the_spread_of_the_timed_windows() -> None:
    """A rate is the mean of its windows; the PNG showed no spread, so a noisy run looked as sure as
    a steady one."""
    record = _record([_run("torchvision-Nw", [500, 500, 500]), _run("iofeed-dataset", [1400, 1600, 1500])])
    pytest.importorskip("matplotlib")
    from matplotlib.collections import LineCollection

    from iofeed.cli.bench.plot import draw

    texts = _texts(record)
    assert "1,500   3.00x the baseline   windows 1,400–1,600" in texts, texts
    figure = draw(record)
    whiskers = [c for axes in figure.axes for c in axes.collections if isinstance(c, LineCollection)]
    spans = sorted(tuple(sorted(seg[:, 0])) for c in whiskers for seg in c.get_segments() if seg[0, 1] == seg[1, 1])
    assert (1400.0, 1600.0) in spans, spans


def test_the_workers_share_of_the_cpu_per_image_is_its_own_column() -> None:
    """The nvjpeg feed's target (<= 0.1 ms per image) is its workers' reading and packing alone: the
    table prints that beside the feed's whole CPU time."""
    run = _run("iofeed-nvjpeg", [2000, 2000])
    run.windows = [Window(w.round, w.drained, w.timed, CpuUse([1.0, 1.0], [1.0, 1.0], feed=1.0, other=0.0,
                                                              children=0.1)) for w in run.windows]
    (record,) = _record([run])["feeds"]
    assert record["cpu_ms_per_image"] == pytest.approx(0.5) and record["worker_cpu_ms_per_image"] == pytest.approx(0.05)
    text = table(_record([run]))
    head, _, row = text.splitlines()[:3]
    assert "workers ms/img" in head and "0.050" in row.split() and "the target <= 0.1" in text, text
