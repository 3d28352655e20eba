"""`iofeed bench`: honest counts, a valid results file and plot, the training path, one-line errors."""
from __future__ import annotations

import importlib.util
import json
import os
import signal
import threading
import time

import pytest

from helpers.images import make_colour_tree
from iofeed.cli.bench.feeds import FEEDS, FeedSpec, open_feed
from iofeed.cli.bench.host import FeedHost, HostFailed, consume
from iofeed.cli.bench.schema import validate
from iofeed.cli.main import main
from iofeed.errors import FeedUnavailable

SIZE, BATCH = 64, 8


class Counting:
    """Wraps a feed's stream and counts, independently of `consume`, the images it really yields."""

    def __init__(self, stream, framework: str = "torch") -> None:
        self.stream, self.images, self.batches = stream, 0, 0
        self.shape = (3, SIZE, SIZE) if framework == "torch" else (SIZE, SIZE, 3)  # the others are NHWC
        self.labels = ("int64",) if framework == "torch" else ("int64", "int32")

    def __iter__(self):
        return self

    def __next__(self):
        images, labels = next(self.stream)
        assert tuple(images.shape[1:]) == self.shape and _dtype(images) == "float32"
        assert len(labels) == images.shape[0] and _dtype(labels) in self.labels
        self.images += len(labels)
        self.batches += 1
        return images, labels


def _dtype(array) -> str:
    """The dtype's name, whichever framework's array (torch, jax, tf, numpy)."""
    return str(getattr(array.dtype, "name", array.dtype)).removeprefix("torch.")


def _counted_windows(spec: FeedSpec, windows: int = 2) -> list[tuple[int, int, int]]:
    """(reported images, really delivered images, batches) of each timed window, drains included."""
    if "nvidia.dali" in spec.entry.needs:
        pytest.importorskip("nvidia.dali")
    try:
        feed = open_feed(spec)
    except FeedUnavailable as exc:
        pytest.skip(str(exc))
    counter = Counting(feed.batches(), spec.entry.framework)
    out = []
    try:
        for _ in range(windows):
            before = counter.images
            drained = consume(counter, batches=feed.capacity + 1)
            assert drained.batches == feed.capacity + 1 and drained.images == counter.images - before
            before = counter.images
            timed = consume(counter, seconds=0.3)
            out.append((timed.images, counter.images - before, timed.batches))
    finally:
        counter.stream.close()
        feed.close()
    return out


@pytest.mark.parametrize("name", [
    pytest.param("torchvision-1w", marks=[pytest.mark.torch, pytest.mark.torchvision]),
    pytest.param("iofeed-dataset", marks=pytest.mark.torch), pytest.param("iofeed-dali", marks=pytest.mark.dali),
    pytest.param("iofeed-jax", marks=pytest.mark.jax), pytest.param("iofeed-tf", marks=pytest.mark.tf),
    pytest.param("iofeed-tf-epochs", marks=pytest.mark.tf), pytest.param("grain", marks=pytest.mark.grain)])
def test_reported_count_is_what_was_delivered(name, colour_tree, colour_dataset):
    source = colour_tree if FEEDS.caps(name).reads == "folder" else colour_dataset
    workers = 1 if name == "torchvision-1w" else 2
    for reported, delivered, batches in _counted_windows(FeedSpec(name, str(source), workers, BATCH, SIZE, "cpu")):
        assert batches > 0 and reported == delivered


@pytest.mark.torch
def test_counts_stay_exact_when_skipped_places_are_refilled(tmp_path):
    """A skipped sample used to leave a short batch, counted by what it held; its place is now refilled
    from the epoch's spares, so every batch is full and the count is still what was delivered."""
    tree = make_colour_tree(tmp_path / "t", per_class=6, corrupt=1)  # 1 of 25 skipped: within the bound
    windows = _counted_windows(FeedSpec("iofeed-folder", str(tree), 2, BATCH, SIZE, "cpu"))
    assert all(reported == delivered for reported, delivered, _ in windows)
    assert all(delivered == batches * BATCH for _, delivered, batches in windows)


def _bench(tmp_path, capsys, *args: str) -> dict:
    out = tmp_path / "res" / "bench.json"
    code = main(["bench", *args, "--batch-size", str(BATCH), "--image-size", str(SIZE), "--rounds", "2",
                 "--warmup", "0", "--json", str(out)])
    printed = capsys.readouterr()
    assert code == 0, printed.err
    record = json.loads(out.read_text())
    assert validate(record) == []
    assert out.with_suffix(".png").read_bytes()[:4] == b"\x89PNG"
    for feed in record["feeds"]:
        assert feed["status"] == "ok", feed["reason"]
        assert feed["name"] in printed.out
        assert len(feed["windows"]) == 2
        assert feed["images"] == sum(w["images"] for w in feed["windows"]) > 0
        assert feed["images_per_sec"] == pytest.approx(feed["images"] / feed["seconds"])
        assert all(w["drained_batches"] == feed["prefetch_batches"] + 1 for w in feed["windows"])
        assert feed["peak_memory_bytes"] > 0 and len(feed["cpu_percent_per_core"]) == record["machine"]["cores"]
    return record


@pytest.mark.torch
@pytest.mark.slow
@pytest.mark.parametrize("feeds", [
    pytest.param("torchvision-1w,iofeed-dataset,iofeed-raw", marks=pytest.mark.torchvision),
    pytest.param("iofeed-dali,dali-folder", marks=pytest.mark.dali)])
def test_cli_writes_valid_results_and_plot(tmp_path, capsys, feeds):
    tree = make_colour_tree(tmp_path / "tree", per_class=10)
    record = _bench(tmp_path, capsys, str(tree), "--feeds", feeds, "--seconds", "0.6", "--model", "none")
    assert [f["name"] for f in record["feeds"]] == feeds.split(",")
    assert (tmp_path / "tree.iof" / "iofeed.json").is_file()  # preprocessed beside the folder
    assert ("iofeed-raw" in feeds) == (tmp_path / "tree.raw.iof" / "iofeed.json").is_file()
    assert record["settings"]["model"] == "none" and record["page_cache"]["state"] == "warm"
    assert record["complete"] is True


@pytest.mark.torch
@pytest.mark.jax
@pytest.mark.tf
@pytest.mark.grain
@pytest.mark.slow
def test_framework_feeds_share_the_table_and_plot(tmp_path, capsys, colour_dataset):
    """iofeed-jax, the tf dataset (.repeat() and a new iterator per epoch) and Grain beside the torch
    adapter, in one run; without --feeds only the PyTorch feeds run."""
    from iofeed.cli.bench.feeds import CATALOGUE, DEFAULT_FEEDS

    names = "iofeed-dataset,iofeed-jax,iofeed-tf,iofeed-tf-epochs,grain"
    record = _bench(tmp_path, capsys, str(colour_dataset), "--feeds", names, "--seconds", "0.6", "--workers", "2")
    assert [f["name"] for f in record["feeds"]] == names.split(",")
    not_framework = {"iofeed-mix", "ffcv", "iofeed-exact-decode"}  # off by default, but no framework feed
    detection = {name for name in CATALOGUE if FEEDS.caps(name).task == "detection"}  # --task detection's
    assert set(names.split(",")) - {"iofeed-dataset"} == set(CATALOGUE) - set(DEFAULT_FEEDS) - not_framework - detection


@pytest.mark.jax
@pytest.mark.torch
def test_jax_batches_reach_the_torch_model_as_channels_last_views_without_a_copy():
    """On a GPU the iofeed-jax feed drives the PyTorch model: NHWC JAX arrays through DLPack are NCHW
    tensors in channels_last memory, sharing the array's buffer (checked here on JAX's CPU device)."""
    import jax.numpy as jnp
    import numpy as np
    import torch

    from iofeed.cli.bench.framework_feeds import _torch_view

    pixels = np.arange(2 * 5 * 7 * 3, dtype=np.float32).reshape(2, 5, 7, 3)
    array = jnp.asarray(pixels)
    images, labels = _torch_view(array, jnp.asarray([3, 1], dtype=jnp.int32))
    assert images.data_ptr() == array.unsafe_buffer_pointer()
    assert images.shape == (2, 3, 5, 7) and images.is_contiguous(memory_format=torch.channels_last)
    assert torch.equal(images, torch.from_numpy(pixels).permute(0, 3, 1, 2))
    assert labels.dtype == torch.int64 and labels.tolist() == [3, 1]


@pytest.mark.torch
def test_a_hung_feed_is_killed_at_its_stall_time_not_after_the_grace_a_live_one_gets():
    """The GPU check gives each bench a few minutes: a feed that stops answering must cost its own
    window (then `failed`), not the 30 s a host that still answers gets to close."""
    host = FeedHost(FeedSpec("synthetic", "", 1, BATCH, SIZE, "cpu"))
    try:
        host.ready()
        os.kill(host.process.pid, signal.SIGSTOP)  # hung: alive, never answering
        with pytest.raises(HostFailed, match=r"^feed synthetic did not answer within 0\.5 s \(killed\)$"):
            host.consume(timeout=0.5, batches=1)
        assert host.process.exitcode == -signal.SIGKILL
    finally:
        host.close()


def test_framework_feeds_refuse_a_model(colour_dataset):
    spec = FeedSpec("iofeed-jax", str(colour_dataset), 1, BATCH, SIZE, "cpu", model="resnet18")
    with pytest.raises(FeedUnavailable, match="without a model"):
        open_feed(spec)


@pytest.mark.torch
@pytest.mark.torchvision
@pytest.mark.slow
def test_training_step_runs_on_cpu(tmp_path, capsys, colour_dataset):
    record = _bench(tmp_path, capsys, str(colour_dataset), "--feeds", "iofeed-dataset", "--model", "resnet18",
                    "--device", "cpu", "--seconds", "0.4", "--no-warm-cache")
    feed, ceiling = record["feeds"]
    assert ceiling["name"] == "synthetic" and record["page_cache"]["state"] == "as found"
    assert record["settings"]["device"] == "cpu" and feed["max_memory_reserved_bytes"] is None
    assert 0 <= feed["training"]["data_wait_fraction"] <= 1
    assert feed["training"]["percent_of_ceiling"] > 0 and feed["training"]["gpu_util_mean"] is None


@pytest.mark.torch
def test_gpu_augment_feed_needs_a_gpu(tmp_path, capsys, colour_tree):
    import torch
    if torch.cuda.is_available():
        pytest.skip("this checks the CPU-only machine's report")
    out = tmp_path / "b.json"
    assert main(["bench", str(colour_tree), "--feeds", "iofeed-raw-gpu", "--seconds", "0.2", "--json", str(out)]) == 0
    (feed,) = json.loads(out.read_text())["feeds"]
    assert feed["status"] == "skipped" and "CUDA GPU" in feed["reason"]
    assert not (colour_tree.parent / "tree.raw.iof").exists()  # nothing preprocessed for a skipped feed


@pytest.mark.parametrize("args", [
    ["--feeds", "torchvision-9w"],
    ["--seconds", "0"],
    ["--seconds", "-1"],
    ["--model", "vgg16"],
    ["--device", "tpu"],
    ["--batch-size", "0"],
])
def test_bad_options_fail_with_one_line(args, colour_tree, capsys):
    assert main(["bench", str(colour_tree), *args]) == 1
    err = capsys.readouterr().err
    assert err.startswith("iofeed: error:") and err.count("\n") == 1


def test_missing_source_fails_with_one_line(tmp_path, capsys):
    assert main(["bench", str(tmp_path / "nowhere")]) == 1
    err = capsys.readouterr().err
    assert "nowhere" in err and err.count("\n") == 1


def test_validator_names_what_is_wrong():
    problems = validate({"format": "iofeed-bench", "version": 2, "feeds": [{"name": 3}]})
    assert "$: missing 'machine'" in problems
    assert any(p.startswith("$.feeds[0].name: expected string") for p in problems)


@pytest.mark.torch
def test_memory_is_sampled_around_timed_windows_never_inside(colour_dataset, monkeypatch):
    """Reading PSS of a worker mapping large shards costs ~0.1 s: it must not fall in the timed part."""
    from iofeed.cli.bench import measure as bench_measure

    timing, samples = [False], []
    cpu_meter_init, cpu_meter_read = bench_measure._CpuMeter.__init__, bench_measure._CpuMeter.read
    sample = bench_measure.MemoryWatch.sample

    def start_timing(self, host):
        cpu_meter_init(self, host)
        timing[0] = True

    def stop_timing(self):
        timing[0] = False
        return cpu_meter_read(self)

    def recorded_sample(self, run, host):
        samples.append(timing[0])
        sample(self, run, host)

    monkeypatch.setattr(bench_measure, "MEMORY_INTERVAL", 0.02)  # the background thread samples every 20 ms
    monkeypatch.setattr(bench_measure._CpuMeter, "__init__", start_timing)
    monkeypatch.setattr(bench_measure._CpuMeter, "read", stop_timing)
    monkeypatch.setattr(bench_measure.MemoryWatch, "sample", recorded_sample)
    run = bench_measure.FeedRun(FeedSpec("iofeed-dataset", str(colour_dataset), 1, BATCH, SIZE, "cpu"))
    bench_measure.measure([run], rounds=2, window_seconds=0.5, warmup_seconds=0.3, progress=False)
    assert run.status == "ok" and len(run.windows) == 2 and all(w.timed.batches > 0 for w in run.windows)
    assert run.peak_memory_bytes > 0
    assert len(samples) >= 6 and not any(samples)


def test_results_are_written_after_every_round_and_kept_on_ctrl_c(tmp_path, capsys, colour_dataset):
    """A real run: the JSON exists, valid and marked incomplete, after round 1; Ctrl-C (SIGINT) in
    round 2 or later writes what was measured, prints its table and exits 130."""
    out = tmp_path / "b.json"
    seen: dict = {}

    def interrupt_after_first_write() -> None:
        deadline = time.monotonic() + 120
        while not out.exists() and time.monotonic() < deadline:
            time.sleep(0.02)
        seen["first"] = json.loads(out.read_text())
        os.kill(os.getpid(), signal.SIGINT)

    watcher = threading.Thread(target=interrupt_after_first_write)
    watcher.start()
    try:
        code = main(["bench", str(colour_dataset), "--feeds", "iofeed-dataset", "--model", "none", "--device", "cpu",
                     "--batch-size", str(BATCH), "--image-size", str(SIZE), "--seconds", "20", "--rounds", "10",
                     "--warmup", "0", "--workers", "1", "--no-warm-cache", "--json", str(out)])
    finally:
        watcher.join()
    printed = capsys.readouterr()
    first = seen["first"]
    assert validate(first) == [] and first["complete"] is False
    assert [len(f["windows"]) for f in first["feeds"]] == [1]
    assert code == 130 and "interrupted" in printed.err
    last = json.loads(out.read_text())
    assert validate(last) == [] and last["complete"] is False
    (feed,) = last["feeds"]
    assert feed["status"] == "ok" and 1 <= len(feed["windows"]) < 10 and feed["images"] > 0
    assert "incomplete" in printed.out and "iofeed-dataset" in printed.out
    assert not list(tmp_path.glob(".b.json.*.tmp"))  # written atomically: no temporary left behind


@pytest.mark.gpu
@pytest.mark.slow
def test_resnet50_bench_fits_every_feed_on_the_gpu(tmp_path, capsys):
    """Every feed, each in its own process with its own ResNet-50 at batch 256 x 224 px, on one GPU:
    none runs out of memory (hosts hand back their cache between windows), and each records its
    peak reservation. 320 JPEGs of 160-1190 px: one batch of 256 per epoch."""
    from iofeed.cli.bench.feeds import DEFAULT_FEEDS, FEEDS, dali_installed
    from iofeed.cli.bench.sources import SOURCES

    tree = make_colour_tree(tmp_path / "tree", per_class=80)
    out = tmp_path / "gpu.json"
    code = main(["bench", str(tree), "--model", "resnet50", "--device", "cuda", "--batch-size", "256",
                 "--seconds", "2", "--rounds", "2", "--warmup", "0", "--workers", "8", "--json", str(out)])
    printed = capsys.readouterr()
    assert code == 0, printed.err
    record = json.loads(out.read_text())
    assert validate(record) == [] and record["complete"] is True
    assert [f["name"] for f in record["feeds"]] == [*DEFAULT_FEEDS, "synthetic"]

    def missing(name: str) -> str | None:
        """What this host lacks to run feed `name` (a GPU host has neither DALI nor moto and s3fs)."""
        caps = FEEDS.caps(name)
        if "nvidia.dali" in caps.needs and not dali_installed():
            return "DALI"
        if SOURCES[caps.source].served and not all(importlib.util.find_spec(m) for m in ("moto", "s3fs")):
            return "moto" if importlib.util.find_spec("moto") is None else "s3fs"  # the endpoint checks moto first
        return None

    for feed in record["feeds"]:
        lacking = missing(feed["name"])
        if lacking is not None:
            assert feed["status"] == "skipped" and lacking in feed["reason"], (feed["name"], feed["reason"])
            continue
        assert feed["status"] == "ok", (feed["name"], feed["reason"])
        assert feed["max_memory_reserved_bytes"] > 0 and feed["training"]["percent_of_ceiling"] > 0
    print(printed.out)  # the table, in the session's log


@pytest.mark.parametrize("missing", ["psutil", "matplotlib", "torchvision"])
def test_a_missing_bench_extra_names_its_pip_command_before_any_work(missing, colour_tree, capsys, monkeypatch):
    """`iofeed bench` without psutil used to end in `ModuleNotFoundError: psutil`."""
    import sys

    monkeypatch.setitem(sys.modules, missing, None)  # an import of it now fails as if not installed
    assert main(["bench", str(colour_tree), "--feeds", "iofeed-dataset"]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"{missing} is not installed: run `pip install 'iofeed[bench]'`" in err
    assert not (colour_tree.parent / "tree.iof").exists(), "nothing preprocessed"


@pytest.mark.torch
@pytest.mark.slow
def test_results_go_beside_the_data_and_the_raw_size_is_said_first(tmp_path, capsys, monkeypatch):
    """Results used to land in ./bench/results of whatever folder bench ran in (a checkout's `git
    status`), and the 5.5 GiB raw dataset was written without a word about its size."""
    tree = make_colour_tree(tmp_path / "data" / "tree", per_class=4)
    cwd = tmp_path / "elsewhere"
    cwd.mkdir()
    monkeypatch.chdir(cwd)
    assert main(["bench", str(tree), "--feeds", "iofeed-raw", "--seconds", "0.3", "--rounds", "1", "--warmup", "0",
                 "--model", "none", "--device", "cpu", "--batch-size", "4", "--image-size", "32",
                 "--no-warm-cache"]) == 0
    printed = capsys.readouterr().out
    said = next(line for line in printed.splitlines() if "preprocessing" in line and "raw.iof" in line)
    assert "16 files, about 0.0 GiB" in said and "GiB free there" in said, said
    assert "iofeed-raw, iofeed-raw-gpu (--feeds without them skips this)" in said, said
    (result,) = (tmp_path / "data" / "tree.bench").glob("bench-*.json")
    assert result.with_suffix(".png").is_file() and f"results will go to {result}" in printed
    assert list(cwd.iterdir()) == [], "nothing written where the command ran"
    assert not (tmp_path / "data" / "tree.iof").exists(), "the JPEG dataset is not needed by iofeed-raw"


def _texts(figure) -> list[str]:
    from matplotlib.text import Text

    return [t.get_text() for t in figure.findobj(Text)]


@pytest.mark.matplotlib
def test_the_plot_shows_every_feed_with_ratio_cpu_memory_and_skipped_reasons(tmp_path):
    """The PNG used to leave skipped feeds out, show no memory although the README said so, and
    put the legend over the last bar."""
    from pathlib import Path

    from iofeed.cli.bench.plot import draw, plot

    results = Path(__file__).resolve().parents[1] / "bench" / "results"
    cpu = json.loads((results / "ab-2026-11-24" / "main-job-final.json").read_text())
    figure = draw(cpu)
    figure.canvas.draw()
    texts = _texts(figure)
    assert "skipped: see (1) below" in texts, "a skipped feed's bar points at its note"
    assert any("augments on the GPU: needs a CUDA GPU" in text for text in texts), "the note gives its reason in full"
    assert "3,941   5.47x the baseline   windows 3,866–3,984" in texts, "the rate, its ratio and its windows' spread"
    assert "720   1.00x the baseline   windows 670–746" in texts
    assert "5,583 (mostly page cache: the mapped raw shards)" in texts, "the raw feed's peak memory in MiB"
    panels = [axes for axes in figure.axes if axes.get_xlabel()]  # the notes under the plot have no axis label
    labels = [axes.get_xlabel() for axes in panels]
    assert len(labels) == 3 and labels[1].startswith("CPU ms per image") and labels[2].startswith("peak memory MiB")
    for axes in panels[:2]:  # the rates and the first small panel (the others share its feed axis)
        assert [t.get_text() for t in axes.get_yticklabels()] == [f["name"] for f in cpu["feeds"]]
    for axes in panels:  # every panel has a bar for every feed, the skipped ones too, and no legend
        assert len(axes.patches) == len(cpu["feeds"]) and axes.get_legend() is None

    gpu = json.loads((results / "h100-resnet50-a.json").read_text())
    figure = draw(gpu)
    panels = [axes for axes in figure.axes if axes.get_xlabel()]
    labels = [axes.get_xlabel() for axes in panels]
    assert any(label.startswith("mean GPU utilisation %") for label in labels) and len(labels) == 6
    assert "3,930   1.43x the baseline   98% of the ceiling   windows 3,894–3,951" in _texts(figure)
    timeline = panels[-1]
    figure.canvas.draw()
    legend = timeline.get_legend().get_window_extent()
    assert legend.x0 >= timeline.get_window_extent().x1, "the legend stands beside the plot, not over it"
    plot(gpu, tmp_path / "plots" / "gpu.png")
    assert (tmp_path / "plots" / "gpu.png").read_bytes()[:4] == b"\x89PNG"
