"""JAX evaluation over several processes: each process must add the same number of rows to a
global batch, so a split that does not divide among them is padded, and `loader.last_valid` marks
the repeats (the padding, and a spare in a skipped sample's place). Masked, every sample of the
split is scored exactly once; the pixels say which sample each row holds (`pixelcode.py`). Two
processes are simulated by two loaders with rank and world_size given, as `jax.distributed`
would set them."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import iofeed
from helpers.adversarial import build
from helpers.pixelcode import Source, decode
from helpers.transforms import fails_on_sample_three
from iofeed.errors import OptionError
from iofeed.format.manifest import Manifest
from iofeed.prepare.run import preprocess
from iofeed.sources.order import OrderSpec, valid_rows

EVAL = iofeed.Recipe(train=False, crop_fraction=1.0)
SAMPLES = 9  # over 2 processes: 5 + 4, padded to 5 + 5


@pytest.fixture(scope="module")
def coded_val(tmp_path_factory) -> tuple[Path, Source]:
    """9 pixel-coded samples of 3 classes, all in the val split."""
    root = tmp_path_factory.mktemp("coded")
    source = build("folder", "clean", root, count=SAMPLES)
    out = root / "coded.iof"
    preprocess(source.spec, out, val_fraction=1.0, shard_bytes=1 << 16, progress=False, workers=1)
    return out, source


def _rows(dataset: Path, world: int, **options) -> list[tuple[int, str, bool]]:
    """(sample from the pixels, class delivered, valid) of every row every process delivered, the
    mask laid out as the labels are (the line docs/frameworks/jax.md gives)."""
    import jax

    classes, rows = Manifest.read(dataset).classes, []
    for rank in range(world):
        with iofeed.loader(str(dataset), split="val", framework="jax", output=iofeed.Output(dtype="uint8"),
                           placement=iofeed.Placement(rank=rank, world_size=world), batch_size=2, image_size=32,
                           workers=1, augment=EVAL, **options) as ld:
            for images, labels in ld:
                valid = jax.make_array_from_process_local_data(labels.sharding, ld.last_valid)
                assert valid.dtype == bool and valid.shape == labels.shape and valid.sharding == labels.sharding
                rows += [(decode(image)[1], classes[int(label)], bool(ok)) for image, label, ok
                         in zip(np.asarray(images), np.asarray(labels), np.asarray(valid), strict=True)]
    return rows


@pytest.mark.jax
def test_masked_evaluation_over_two_processes_scores_each_sample_once(coded_val):
    dataset, source = coded_val
    rows = _rows(dataset, world=2)
    assert len(rows) == SAMPLES + 1, "one padding row evens the shares"
    assert all(source.kept()[sample] == name for sample, name, _ in rows), "labels as the pixels say"
    assert sorted(sample for sample, _, _ in rows) != list(range(SAMPLES)), "unmasked, one sample twice"
    assert sorted(sample for sample, _, ok in rows if ok) == list(range(SAMPLES))


@pytest.mark.jax
def test_a_spare_in_a_skipped_samples_place_is_masked(coded_val):
    """Sample 3's transform raises: a spare (a later sample of the pass, scored in its own batch too)
    keeps the batch full; masked, sample 3 is missing and no other sample counts twice."""
    dataset, source = coded_val
    rows = _rows(dataset, world=2, transform=fails_on_sample_three, skips=iofeed.Skips(max_skipped=0.5))
    assert 3 not in {sample for sample, _, _ in rows}
    assert len(rows) == SAMPLES + 1, "full batches: the spare took sample 3's place"
    assert all(source.kept()[sample] == name for sample, name, _ in rows)
    assert sorted(sample for sample, _, ok in rows if ok) == [s for s in range(SAMPLES) if s != 3]


@pytest.mark.jax
def test_with_drop_last_nothing_is_padded_and_every_row_is_valid(coded_val):
    """drop_last trims the shares to 4 + 4 instead of padding them: no repeat, so no row masked."""
    dataset, _ = coded_val
    rows = _rows(dataset, world=2, drop_last=True)
    assert len(rows) == 8 and len({sample for sample, _, _ in rows}) == 8 and all(ok for _, _, ok in rows)


@pytest.mark.jax
def test_masked_evaluation_resumed_on_another_process_count_scores_each_sample_once(coded_val):
    """Stopped after one batch on 2 processes (4 samples done), resumed on 3: the rest (5 samples)
    is padded to 3 x 2 rows, and the masked rows before and after are the split, each once."""
    dataset, source = coded_val
    options = dict(split="val", framework="jax", output=iofeed.Output(dtype="uint8"), batch_size=2, image_size=32,
                   workers=1, augment=EVAL)
    seen, state = [], None
    for rank in range(2):
        with iofeed.loader(str(dataset), placement=iofeed.Placement(rank=rank, world_size=2), **options) as ld:
            images, _ = next(iter(ld))
            seen += [(decode(image)[1], bool(ok)) for image, ok in zip(np.asarray(images), ld.last_valid, strict=True)]
            state = ld.state_dict()
    after = []
    for rank in range(3):
        with iofeed.loader(str(dataset), placement=iofeed.Placement(rank=rank, world_size=3), **options) as ld:
            ld.load_state_dict(state)
            for images, _ in ld:
                after += [(decode(image)[1], bool(ok)) for image, ok in zip(np.asarray(images), ld.last_valid,
                                                                            strict=True)]
    assert state["samples_done"] == 4 and len(seen) == 4 and len(after) == 6, "one padding row after the resume"
    assert sorted(sample for sample, ok in seen + after if ok) == list(range(SAMPLES))


@pytest.mark.parametrize("shuffle", ["none", "global"])
@pytest.mark.parametrize(("samples", "world", "batch", "done"), [
    (9, 2, 2, 0), (8, 3, 2, 0), (23, 4, 3, 0), (23, 4, 3, 5), (10, 5, 4, 7), (12, 4, 2, 0)])
def test_own_samples_cover_the_rest_of_an_epoch_exactly_once(samples, world, batch, done, shuffle):
    """Over every rank, the rows `own_samples` keeps are the epoch's order past `done`, each once,
    whatever the padding; `valid_rows` keeps exactly those rows of the batches as planned."""
    owned, padded = [], 0
    for rank in range(world):
        spec = OrderSpec(samples, batch, shuffle, drop_last=False, seed=1, rank=rank, world_size=world)
        batches = spec.batches(2, done, first=3)
        own = spec.own_samples(batches, done)
        assert [len(o) for o in own[:3]] == [0, 0, 0], "batches delivered before a resume own nothing"
        for planned, mine in zip(batches, own, strict=True):
            valid = valid_rows(planned, mine)
            owned += planned[valid].tolist()
            padded += int((~valid).sum())
    rest = OrderSpec(samples, batch, shuffle, drop_last=False, seed=1).rank_indices(2, done)
    assert sorted(owned) == sorted(rest.tolist())
    assert padded == -(samples - done) % world


def test_valid_rows_keeps_the_first_row_of_a_sample_delivered_twice():
    """A spare from the next epoch may be one of the batch's own samples: it counts once."""
    assert valid_rows(np.array([5, 7, 5, 9]), np.array([5, 9])).tolist() == [True, False, False, True]


def test_valid_rows_keeps_a_sample_planned_twice_in_one_batch_twice():
    """A mixture's up-sampled source may plan one sample twice in a batch: both rows are its own
    (a row per planned occurrence is valid, a spare beyond them is not)."""
    assert valid_rows(np.array([4, 7, 4]), np.array([4, 7, 4])).tolist() == [True, True, True]
    assert valid_rows(np.array([4, 4, 7, 4]), np.array([4, 7, 4])).tolist() == [True, True, True, False]


def _batches(dataset: Path, **options) -> list[list[tuple[int, bool]]]:
    """(sample from the pixels, valid) of each row, batch by batch, on one process."""
    with iofeed.loader(str(dataset), split="val", framework="jax", output=iofeed.Output(dtype="uint8"), batch_size=2,
                       image_size=32,
                       workers=1, augment=EVAL, **options) as ld:
        return [[(decode(image)[1], bool(ok)) for image, ok in zip(np.asarray(images), ld.last_valid, strict=True)]
                for images, _ in ld]


def _right(sample: int) -> bool:
    return sample % 5 != 0  # a stand-in model that gets samples 0 and 5 wrong


@pytest.mark.jax
def test_per_batch_means_get_no_one_row_last_batch_with_drop_last_or_pad_batches(coded_val):
    """The Flax ImageNet example averages accuracy per batch: a 1-row last batch (9 samples at batch 2)
    weighs one sample as much as a whole batch. drop_last keeps full batches only, as its own
    pipeline does (`drop_remainder`); pad="batches" fills the last one with a masked repeat, so a
    masked sum is the split's exact accuracy."""
    dataset, _ = coded_val
    assert [len(b) for b in _batches(dataset)] == [2, 2, 2, 2, 1], "the default: a 1-row last batch"
    dropped = _batches(dataset, drop_last=True)
    assert [len(b) for b in dropped] == [2] * 4 and all(ok for b in dropped for _, ok in b)
    delivered = [sample for b in dropped for sample, _ in b]
    per_batch = np.mean([np.mean([_right(s) for s, _ in b]) for b in dropped])
    assert per_batch == pytest.approx(np.mean([_right(s) for s in delivered])), "full batches: the mean is exact"
    padded = _batches(dataset, order=iofeed.Order(pad="batches"))
    assert [len(b) for b in padded] == [2] * 5 and [ok for _, ok in padded[-1]] == [True, False]
    masked = [sample for b in padded for sample, ok in b if ok]
    assert sorted(masked) == list(range(SAMPLES))
    assert sum(_right(s) for s in masked) / len(masked) == pytest.approx(7 / 9), "samples 0 and 5 wrong"


@pytest.mark.jax
def test_pad_batches_fills_every_batch_on_every_process_and_pad_none_is_refused(coded_val):
    dataset, _ = coded_val
    options = dict(split="val", framework="jax", output=iofeed.Output(dtype="uint8"), batch_size=2, image_size=32,
                   workers=1, augment=EVAL)
    rows = []
    for rank in range(2):
        with iofeed.loader(str(dataset), placement=iofeed.Placement(rank=rank, world_size=2),
                           order=iofeed.Order(pad="batches"), **options) as ld:
            for images, _ in ld:
                assert len(images) == 2, "every batch full, the last ones too"
                rows += [(decode(image)[1], bool(ok)) for image, ok in zip(np.asarray(images), ld.last_valid,
                                                                           strict=True)]
    assert sorted(sample for sample, ok in rows if ok) == list(range(SAMPLES))
    with pytest.raises(OptionError, match=r"Order\(pad='none'\) leaves the 2 JAX processes uneven shares"):
        iofeed.loader(str(dataset), placement=iofeed.Placement(rank=0, world_size=2), order=iofeed.Order(pad="none"),
                      **options)
