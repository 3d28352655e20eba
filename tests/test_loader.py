"""The loader contract: counts, labels, order, sharding, resume, errors, clean shutdown."""
from __future__ import annotations

import hashlib
import itertools

import numpy as np
import pytest

import iofeed
from helpers.images import label_from_pixels
from helpers.runs import slot_memory
from iofeed.errors import LoaderStateError, OptionError, SourceError

ENGINES = ["workers", pytest.param("dali", marks=pytest.mark.dali)]


def _make(source, engine, **options):
    if engine == "dali":
        pytest.importorskip("nvidia.dali")
    options.setdefault("workers", 2)
    return iofeed.loader(source, engine=engine, **options)


def _epoch(ld) -> list[tuple[np.ndarray, np.ndarray, str]]:
    """(indices, labels, pixel digest) of every batch of one epoch, copied out of shared memory."""
    out = []
    for images, labels in ld:
        out.append((ld.last_indices.copy(), np.array(labels), hashlib.sha256(np.ascontiguousarray(images)).hexdigest()))
    return out


@pytest.mark.parametrize("engine", ENGINES)
@pytest.mark.parametrize("which", ["folder", "dataset"])
def test_counts_and_labels(colour_tree, colour_dataset, engine, which):
    source = colour_tree if which == "folder" else colour_dataset
    with _make(source, engine, batch_size=4, drop_last=False) as ld:
        seen = []
        batches = 0
        for images, labels in ld:
            images = np.asarray(images)
            assert images.dtype == np.uint8 and images.shape[1:] == (224, 224, 3)
            assert labels.dtype == np.int64
            for image, label in zip(images, labels):
                assert label_from_pixels(image) == label
            seen.extend(ld.last_indices.tolist())
            batches += 1
        assert batches == len(ld)
        assert sorted(seen) == list(range(len(ld.source)))
        assert ld.stats.images == len(ld.source)


@pytest.mark.parametrize("engine", ENGINES)
def test_epochs_differ_and_repeat(colour_dataset, engine):
    with _make(colour_dataset, engine, batch_size=4, seed=1) as ld:
        first, second = _epoch(ld), _epoch(ld)
        ld.set_epoch(0)
        again = _epoch(ld)
    assert [b[0].tolist() for b in first] != [b[0].tolist() for b in second]
    assert [b[2] for b in first] == [b[2] for b in again]


@pytest.mark.parametrize("engine", ENGINES)
def test_ranks_equal_disjoint_and_covering(colour_dataset, engine):
    per_rank = []
    for rank in range(3):
        with _make(colour_dataset, engine, batch_size=4, placement=iofeed.Placement(rank=rank, world_size=3),
                   drop_last=False) as ld:
            per_rank.append([i for batch in _epoch(ld) for i in batch[0].tolist()])
            assert len(ld) == 3
    assert len({len(r) for r in per_rank}) == 1
    everything = [i for r in per_rank for i in r]
    total = len(iofeed.loader(colour_dataset, batch_size=4, workers=1).source)
    assert set(everything) == set(range(total))
    assert len(everything) - total == len(everything) - len(set(everything)) < 3, "only padding repeats"


def test_val_split_is_centre_cropped_and_ordered(colour_dataset):
    with iofeed.loader(colour_dataset, split="val", batch_size=3, workers=1) as ld:
        batches = _epoch(ld)
        assert [i for b in batches for i in b[0].tolist()] == list(range(8))
        assert len(ld) == 3 and ld.stats.images == 8


@pytest.mark.torch
@pytest.mark.parametrize("memory_format", [None, "channels_last"])
def test_torch_adapter_normalises_on_device_layout(colour_dataset, memory_format):
    import torch
    with iofeed.loader(colour_dataset, batch_size=4, workers=1, seed=2) as raw:
        uint8 = np.array(next(iter(raw))[0])
    with iofeed.loader(colour_dataset, batch_size=4, workers=1, seed=2, framework="torch",
                       output=iofeed.Output(memory_format=memory_format)) as ld:
        images, labels = next(iter(ld))
    assert images.shape == (4, 3, 224, 224) and images.dtype == torch.float32
    assert images.is_contiguous(memory_format=torch.channels_last if memory_format else torch.contiguous_format), \
        "PyTorch's default format unless channels_last is asked for"
    assert labels.dtype == torch.int64
    mean = torch.tensor([0.485, 0.456, 0.406]).view(1, 3, 1, 1)
    std = torch.tensor([0.229, 0.224, 0.225]).view(1, 3, 1, 1)
    expected = (torch.from_numpy(uint8).permute(0, 3, 1, 2).float() / 255 - mean) / std
    assert torch.allclose(images, expected, atol=1e-4)


@pytest.mark.torch
@pytest.mark.parametrize("dtype_name", ["float32", "float16", "float64", "bfloat16"])
def test_torch_adapter_normalises_every_host_dtype(dtype_name):
    """float32/64 through numpy on the CPU, half precision computed in float32 and rounded once."""
    import torch

    from iofeed.adapters.torch.adapter import TorchAdapter
    from iofeed.engines.base import Batch

    dtype = getattr(torch, dtype_name)
    pixels = np.random.default_rng(0).integers(0, 256, (3, 32, 32, 3), dtype=np.uint8)
    adapter = TorchAdapter("cpu", dtype, 32)
    for _ in range(2):  # the second batch reuses a recycled output tensor
        images, _ = adapter(Batch(pixels, np.arange(3), np.arange(3)))
    mean = torch.tensor([0.485, 0.456, 0.406]).view(1, 3, 1, 1)
    std = torch.tensor([0.229, 0.224, 0.225]).view(1, 3, 1, 1)
    expected = (torch.from_numpy(pixels).permute(0, 3, 1, 2).double() / 255 - mean) / std
    assert images.dtype == dtype and images.is_contiguous()
    tolerance = {"float32": 1e-5, "float64": 1e-5, "float16": 2e-3, "bfloat16": 1e-2}[dtype_name]
    assert torch.allclose(images.double(), expected, atol=tolerance)


@pytest.mark.torch
def test_torch_batches_kept_by_the_caller_stay_intact(colour_dataset):
    """Labels and images handed out are the caller's: later batches and close() leave them be
    (labels used to be views of the shared-memory slot: changed later, unmapped at close)."""
    import torch

    def epoch(keep: bool) -> list:
        with iofeed.loader(colour_dataset, batch_size=2, workers=2, seed=1, framework="torch") as ld:
            return [(x, y) if keep else (x.clone(), y.clone()) for x, y in ld]

    kept, cloned = epoch(keep=True), epoch(keep=False)
    assert len(kept) == len(cloned) >= 4
    for (x, y), (x0, y0) in zip(kept, cloned):
        assert torch.equal(y, y0) and torch.equal(x, x0)


COPY_DELAY = 100_000_000  # GPU cycles queued on the copy stream before each copy (~50 ms)
CONSUMER_WORK = 4_000_000_000  # GPU cycles queued on the consumer stream after a batch (~2 s)


@pytest.mark.torch
@pytest.mark.gpu
def test_cuda_copies_stay_exact_when_the_copy_stream_is_late_and_never_wait_for_the_consumer(
        colour_dataset, monkeypatch):
    """The copy stream is delayed before every copy, so the consumer's work reads a batch only if it
    waits for that stream, and a staging buffer is refilled only after its copy ran: without the
    consumer's stream wait or the staging buffers' synchronisation, batches come out wrong. Work
    queued on the consumer stream is still pending when `next()` returns: the loader never waits
    for the training stream (an event, not a clock, says so)."""
    import torch
    # the workers engine named: its pixels are the CPU path's (DALI's nvJPEG differs by a few levels)
    with iofeed.loader(colour_dataset, batch_size=4, workers=1, seed=2, framework="torch",
                       engine="workers") as ld:
        expected = [(x.clone(), y.clone()) for x, y in ld]
    entered = {"n": 0}
    real_stream = torch.cuda.stream

    class LateStream:
        """`torch.cuda.stream(s)` that queues COPY_DELAY cycles on `s` first (the loader's copy stream)."""

        def __init__(self, stream):
            self._inner, self._late = real_stream(stream), stream is not None

        def __enter__(self):
            out = self._inner.__enter__()
            if self._late:  # torch.cuda.stream(None) is the current stream: left alone
                torch.cuda._sleep(COPY_DELAY)
                entered["n"] += 1
            return out

        def __exit__(self, *exc):
            return self._inner.__exit__(*exc)

    monkeypatch.setattr(torch.cuda, "stream", LateStream)
    pending_after_next = []
    with iofeed.loader(colour_dataset, batch_size=4, workers=1, seed=2, framework="torch",
                       placement=iofeed.Placement(device="cuda"),
                       engine="workers") as ld:
        got = []
        batches = iter(ld)
        for k, (x, y) in enumerate(batches):
            got.append((x.clone(), y.clone()))  # queued on the consumer stream, behind the late copy
            if k in (1, 2):  # the loader's next() must not wait for this
                torch.cuda._sleep(CONSUMER_WORK)
                queued = torch.cuda.Event()
                queued.record()
                try:
                    got.append(next(batches))
                except StopIteration:
                    break
                pending_after_next.append(not queued.query())
                got[-1] = (got[-1][0].clone(), got[-1][1].clone())
        torch.cuda.synchronize()
    assert entered["n"] >= len(got), "the loader no longer copies under torch.cuda.stream(): update this test"
    assert pending_after_next == [True, True]
    assert len(got) == len(expected)
    for (x, y), (x0, y0) in zip(got, expected):
        assert x.is_cuda and y.is_cuda and torch.equal(y.cpu(), y0)
        assert torch.allclose(x.cpu(), x0, atol=1e-5)


def test_bad_options_and_sources(colour_dataset, tmp_path):
    with pytest.raises(OptionError, match="framework"):
        iofeed.loader(colour_dataset, batch_size=4, framework="mxnet")
    with pytest.raises(OptionError, match="on_error"):
        iofeed.loader(colour_dataset, batch_size=4, skips=iofeed.Skips(on_error="ignore"))
    with pytest.raises(OptionError, match="split"):
        iofeed.loader(colour_dataset, batch_size=4, split="test")
    with pytest.raises(OptionError, match="batch_size"):
        iofeed.loader(colour_dataset, batch_size=0)
    with pytest.raises(SourceError, match="not found"):
        iofeed.loader(tmp_path / "missing", batch_size=4)


def test_prefetch_depth_defaults_and_bounds(colour_dataset):
    """Two batches per worker and at least 8 ahead by default; `prefetch` and the budget bound it."""
    slot = 4 * 224 * 224 * 3 + 4 * 8
    cases = [({"workers": 1}, 8), ({"workers": 2, "resources": iofeed.Resources(prefetch=3)}, 3),
             ({"workers": None}, 8),
             ({"workers": 2, "resources": iofeed.Resources(memory_budget=5 * slot)}, 4)]
    for options, depth in cases:
        with iofeed.loader(colour_dataset, batch_size=4, **options) as ld:
            assert ld.stats.settings["prefetch_batches"] == depth, options
            assert sum(1 for _ in ld) == len(ld)


def test_the_next_epoch_starts_during_this_one(colour_dataset):
    """Each new pass (each Keras epoch: a new iterator) begins on batches the workers started in
    the previous pass, with the same workers; a pass the loader was moved away from does not."""
    with iofeed.loader(colour_dataset, batch_size=4, workers=2, image_size=64) as ld:
        for _ in itertools.islice(ld, len(ld)):  # stops after len() batches, as Lightning does
            pass
        pids = [p.pid for p in ld.engine.processes()]
        assert ld.engine.started_ahead == 0
        sum(1 for _ in ld)
        begun = ld.engine.started_ahead
        assert begun == ld.engine.starts_ahead == ld.stats.settings["prefetch_batches"] - 1, (
            "what the engine says it starts early (and a streamed pass fetches shards for) is what it starts")
        ld.set_epoch(7)
        sum(1 for _ in ld)
        assert ld.engine.started_ahead == begun, "epoch 2's early batches were not epoch 7's"
        assert [p.pid for p in ld.engine.processes()] == pids


def test_an_abandoned_epoch_leaves_its_queued_batches_undone(tmp_path):
    """`break` then a jump elsewhere: batches queued for the old pass are not decoded, only
    waited for (a worker stops a stale task at its next sample), and the new pass is exact."""
    from helpers.images import make_colour_tree

    tree = make_colour_tree(tmp_path / "tree", per_class=40)
    options = {"batch_size": 16, "image_size": 64, "workers": 1, "resources": iofeed.Resources(prefetch=6), "seed": 4}
    with iofeed.loader(tree, **options) as ld:
        next(iter(ld))
        ld.set_epoch(3)
        jumped = [ld.last_indices.copy() for _ in ld]
        assert ld.engine.stopped_early > 0
    with iofeed.loader(tree, **options) as fresh:
        fresh.set_epoch(3)
        assert all(np.array_equal(a, fresh.last_indices) for a, _ in zip(jumped, fresh, strict=True))


def test_close_stops_the_workers_and_frees_their_memory(colour_dataset):
    """The workers engine's part of the contract's close check: its processes and its slot memory."""
    before, shm_before = slot_memory(), _shm_mappings()
    ld = iofeed.loader(colour_dataset, batch_size=4, workers=2)
    for k, _ in enumerate(ld):
        if k == 1:
            break
    procs = list(ld.engine.processes())
    assert slot_memory() != before, "a live loader holds its slot memory"
    assert _shm_mappings() == shm_before, "slot memory is anonymous: no /dev/shm name to leak"
    del _  # the last batch's views keep the memory mapped
    ld.close()
    assert not any(p.is_alive() for p in procs)
    assert slot_memory() == before


def _shm_mappings() -> set[str]:
    """The /dev/shm files this process maps, other libraries' named semaphores (sem.*) aside; an
    earlier test's library (a multiprocessing heap arena, pym-*) may have left its own."""
    with open("/proc/self/maps") as maps:
        return {line.split()[-2] if line.rstrip().endswith("(deleted)") else line.split()[-1]
                for line in maps if "/dev/shm/" in line and "/dev/shm/sem." not in line}


@pytest.mark.torch
def test_torch_cpu_outputs_kept_by_the_caller_are_never_overwritten(colour_dataset):
    import torch
    with iofeed.loader(colour_dataset, batch_size=4, workers=2, seed=4, framework="torch") as ld:
        kept = [images for images, _ in ld]
        slices = [images[:1] for images, _ in ld]  # only a view survives each step
        ld.set_epoch(0)
        again = [images.clone() for images, _ in ld]
        ld.set_epoch(1)
        again_slices = [images[:1].clone() for images, _ in ld]
    assert len({t.data_ptr() for t in kept}) == len(kept)
    assert all(torch.equal(a, b) for a, b in zip(kept, again, strict=True))
    assert all(torch.equal(a, b) for a, b in zip(slices, again_slices, strict=True))


def test_a_second_live_iteration_stops_the_first(colour_dataset):
    with iofeed.loader(colour_dataset, batch_size=4, workers=1) as ld:
        first = iter(ld)
        next(first)
        second = iter(ld)
        next(second)
        with pytest.raises(LoaderStateError, match="one iteration at a time"):
            next(first)


def test_a_closed_loader_says_so_in_one_line(colour_dataset):
    with iofeed.loader(colour_dataset, batch_size=4, workers=1) as ld:
        live = iter(ld)
        next(live)
    for stream in (live, iter(ld)):
        with pytest.raises(LoaderStateError, match=r"^this loader was closed .*iofeed\.loader\(\.\.\.\)$"):
            next(stream)
