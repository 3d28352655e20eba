"""A batch stays what it was while the consumer holds it, in every framework: all of two epochs
kept in a list (more batches than the engine has slots), each compared with a copy taken when it
arrived. A consumer that streams gets no copy; one that keeps more than the pool gets owned copies,
counted in `stats.copied_batches`."""
from __future__ import annotations

import os

import numpy as np
import pytest

import iofeed
from helpers.contract import assert_kept_unchanged, keep_two_epochs
from helpers.images import label_from_pixels
from helpers.keras_fit import run_on_backend

SMALL = {"batch_size": 4, "image_size": 32, "workers": 1, "seed": 2,
         "resources": iofeed.Resources(prefetch=2)}  # 3 slots


def _slots(ld) -> int:
    return ld.stats.settings["prefetch_batches"] + 1


def test_numpy_batches_kept_past_the_pool_are_owned_copies(colour_dataset):
    with iofeed.loader(colour_dataset, **SMALL) as ld:
        kept = keep_two_epochs(ld, np.array)
        assert_kept_unchanged(kept, np.array, _slots(ld))
        copied = ld.stats.copied_batches
        assert copied == ld.stats.as_dict()["copied_batches"]
    for images, _, labels in kept:
        assert [label_from_pixels(image) for image in images] == labels.tolist()
    lent = len(kept) - copied
    assert copied > 0 and lent == _slots(ld) - 1, "all slots but one lent, the rest copied"


def test_a_streaming_consumer_gets_no_copy(colour_dataset):
    """The common case: each batch dropped when the next is asked for (numpy views, torch's
    normalised tensors): no batch is copied out of shared memory."""
    with iofeed.loader(colour_dataset, **SMALL) as ld:
        for _ in range(3):
            for images, labels in ld:
                assert label_from_pixels(images[0]) == labels[0]
        assert ld.stats.batches == 24 and ld.stats.copied_batches == 0


def test_dropped_batches_give_their_slots_back(colour_dataset):
    """Batches kept for a while, then dropped, free their slots: the batches after are lent again."""
    with iofeed.loader(colour_dataset, **SMALL) as ld:
        it = iter(ld)
        first, second = next(it), next(it)  # all 3 slots but one lent
        third = next(it)
        assert ld.stats.copied_batches == 1
        del first, second, third
        for _ in it:
            pass
        assert ld.stats.batches == 8 and ld.stats.copied_batches == 1


def test_abandoned_iterators_still_referenced_hold_no_slot(colour_dataset):
    """Keras and Lightning keep the iterator of a pass they left (a peek, the sanity check) after
    dropping its batch: the suspended pass still held that batch's slot, and two of them left the
    next passes copying every batch out of a pool they had emptied."""
    with iofeed.loader(colour_dataset, **SMALL) as ld:
        peeks = [iter(ld), iter(ld)]
        for it in peeks:
            images, labels = next(it)
            assert label_from_pixels(images[0]) == labels[0]
        del images, labels
        for images, labels in ld:
            assert label_from_pixels(images[0]) == labels[0]
        assert ld.stats.batches == 2 + 8 and ld.stats.copied_batches == 0
        assert len(peeks) == 2  # still referenced, like a trainer's fetcher


@pytest.mark.torch
@pytest.mark.parametrize("augment", ["imagenet", "uint8"])
def test_torch_cpu(colour_dataset, augment):
    with iofeed.loader(colour_dataset, framework="torch", augment=augment, **SMALL) as ld:
        kept = keep_two_epochs(ld, lambda x: x.numpy().copy())
        assert_kept_unchanged(kept, lambda x: x.numpy(), _slots(ld))
        assert ld.stats.copied_batches == 0, "the adapter's copy released each slot"


@pytest.fixture
def borrowed_references(monkeypatch):
    """Reference counts as an interpreter that borrows references reports them (CPython 3.14 skips
    the increment for some stack references; free-threaded builds defer counts): one lower than
    3.11 counts for the same holders. Reuse that read `sys.getrefcount` against a threshold then
    took an output the consumer still held for a free one."""
    import sys

    counted = sys.getrefcount
    monkeypatch.setattr(sys, "getrefcount", lambda obj: counted(obj) - 2)  # this lambda's own reference too


@pytest.mark.torch
@pytest.mark.parametrize("augment", ["imagenet", "uint8"])
def test_torch_cpu_batches_kept_whatever_the_reference_counts_say(colour_dataset, augment, borrowed_references):
    with iofeed.loader(colour_dataset, framework="torch", augment=augment, **SMALL) as ld:
        kept = keep_two_epochs(ld, lambda x: x.numpy().copy())
        assert_kept_unchanged(kept, lambda x: x.numpy(), _slots(ld))
    if augment == "uint8":
        for images, _, labels in kept:
            assert [label_from_pixels(image.permute(1, 2, 0).numpy()) for image in images] == labels.tolist()


@pytest.mark.jax
def test_jax_host_batches_kept_whatever_the_reference_counts_say(colour_dataset, borrowed_references):
    """The host normaliser (tf, jax and keras on the CPU) rested on the same thresholds."""
    with iofeed.loader(colour_dataset, framework="jax", output=iofeed.Output(dtype="float32"), **SMALL) as ld:
        kept = keep_two_epochs(ld, np.array)
        assert_kept_unchanged(kept, np.asarray, _slots(ld))


@pytest.mark.torch
def test_torch_cpu_batches_kept_only_through_dlpack_stay_as_delivered(colour_dataset):
    """Each batch handed on by DLPack (numpy here; JAX and other frameworks alike) and the tensor
    itself dropped: the export holds the memory, and with it the lease."""
    with iofeed.loader(colour_dataset, framework="torch", **SMALL) as ld:
        kept = []
        for _ in range(2):
            for images, labels in ld:
                kept.append((np.from_dlpack(images), images.numpy().copy(), labels.numpy().copy()))
        assert len(kept) == 16 > _slots(ld)
    assert all(np.array_equal(exported, then) for exported, then, _ in kept), "a kept batch was written over"


@pytest.mark.torch
def test_a_streaming_torch_consumer_reuses_a_few_outputs(colour_dataset):
    """Reuse still happens: batches dropped as the next arrives come back to the pool (their lease),
    so three epochs need a few output blocks, not one per batch."""
    from iofeed.adapters.output_pool import KEEP

    with iofeed.loader(colour_dataset, framework="torch", **SMALL) as ld:
        for _ in range(3):
            for images, _labels in ld:
                assert images.shape == (4, 3, 32, 32)
        assert ld.stats.batches == 24 and 0 < ld._adapter.layout.pool.made <= KEEP


@pytest.mark.jax
@pytest.mark.parametrize("dtype", ["uint8", "float32"])
def test_jax(colour_dataset, dtype):
    """uint8 batches on CPU devices alias the slot (XLA keeps the array): held by the lease."""
    with iofeed.loader(colour_dataset, framework="jax", output=iofeed.Output(dtype=dtype), **SMALL) as ld:
        kept = keep_two_epochs(ld, np.array)
        assert_kept_unchanged(kept, np.asarray, _slots(ld))
    if dtype == "uint8":
        for images, _, labels in kept:
            assert [label_from_pixels(image) for image in np.asarray(images)] == labels.tolist()


@pytest.mark.tf
def test_tf(colour_dataset):
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    dataset = iofeed.loader(colour_dataset, framework="tf", **SMALL)
    with dataset.iofeed_loader as ld:
        kept = keep_two_epochs(dataset, lambda x: np.array(x.numpy()))
        assert_kept_unchanged(kept, lambda x: x.numpy(), _slots(ld))


@pytest.mark.keras
@pytest.mark.slow
@pytest.mark.parametrize("backend", [pytest.param("jax", marks=pytest.mark.jax),
                                     pytest.param("torch", marks=pytest.mark.torch)])
def test_keras(colour_dataset, tmp_path, backend):
    """Keras on JAX and PyTorch iterates the Loader itself (on TensorFlow: the tf dataset above)."""
    result = run_on_backend("helpers.kept_batches", colour_dataset, tmp_path / "kept.json", backend)
    assert result["backend"] == backend and result["kept"] == 16 > result["slots"]
    assert result["changed"] == 0, result


def test_lent_batches_name_the_block_they_lie_in(colour_dataset):
    """What the CUDA copy pins in place (`Batch.region`, the whole slot block) holds the lent
    images; a copied batch lies in no block of the engine's."""
    with iofeed.loader(colour_dataset, **SMALL) as ld:
        batches = list(ld.engine.run(0, ld.order.batches(0), 0, 0))
        lent = [b for b in batches if b.lease is not None]
        assert lent and len(lent) < len(batches)
        for batch in batches:
            if batch.lease is None:
                assert batch.region is None and batch.copied
                continue
            address, size = batch.region
            start = batch.images.ctypes.data
            assert address <= start and start + batch.images.nbytes <= address + size
            assert size == ld.engine.layout.total_bytes


@pytest.mark.torch
@pytest.mark.gpu
def test_cuda_batches_kept_while_the_copy_stream_lags_stay_exact(colour_dataset):
    """The CUDA twin: copies straight from the pinned slots on a side stream held back by a long
    kernel, three slots only: a slot released before its copy completed would be refilled under
    the copy. Every kept device batch equals the CPU loader's."""
    import torch

    options = {**SMALL, "engine": "workers"}
    with iofeed.loader(colour_dataset, framework="torch", **options) as ld:
        expected = keep_two_epochs(ld, lambda x: x.numpy().copy())
    with iofeed.loader(colour_dataset, framework="torch", placement=iofeed.Placement(device="cuda"), **options) as ld:
        kept = []
        for _ in range(2):
            for images, labels in ld:
                copier = ld._adapter._copier
                with torch.cuda.stream(copier._stream):
                    torch.cuda._sleep(20_000_000)  # the next copy waits behind this
                kept.append((images, labels))
        torch.cuda.synchronize()
        assert copier.registration.registered, "the slots were pinned in place, not staged"
    assert len(kept) == len(expected) > 3
    for (images, labels), (_, then, labels_then) in zip(kept, expected):
        assert torch.equal(labels.cpu(), torch.from_numpy(labels_then))
        np.testing.assert_allclose(images.cpu().numpy(), then, atol=1e-5)
