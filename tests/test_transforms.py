"""`transform=` (per sample, in the workers) and `batch_transform=` (per batch, in the adapter):
checked before any work, seeded from the batch key, failures named and counted, CPU time measured."""
from __future__ import annotations

import functools
import random
import re

import numpy as np
import pytest

import iofeed
from helpers import transforms as T
from helpers.images import make_same_picture_tree
from helpers.runs import slot_memory
from iofeed.augment.batch_key import BatchKey
from iofeed.augment.transforms import (
    SAMPLE_STREAM,
    SampleTransform,
    TransformedImage,
    _seeds,
    preserved_globals,
    seed_globals,
)
from iofeed.engines import select
from iofeed.errors import OptionError, SampleError, WorkerError
from iofeed.options.loader_options import LoaderOptions
from iofeed.runtime.gpu import nvml as gpu_nvml

SMALL = {"batch_size": 4, "image_size": 32, "seed": 5}


def _epoch(ld) -> list[tuple[list[int], bytes]]:
    return [(ld.last_indices.tolist(), np.ascontiguousarray(np.asarray(images)).tobytes()) for images, _ in ld]


@pytest.mark.parametrize("transform", [T.jitter, T.noise_with_rng, pytest.param(T.torch_noise,
                                                                                 marks=pytest.mark.torch)])
def test_same_pixels_whatever_the_worker_count_and_different_per_epoch(colour_dataset, transform):
    runs = []
    for workers in (1, 2):
        with iofeed.loader(colour_dataset, workers=workers, transform=transform, **SMALL) as ld:
            runs.append((_epoch(ld), _epoch(ld)))
    assert runs[0] == runs[1]
    first, second = runs[0]
    with iofeed.loader(colour_dataset, workers=1, **SMALL) as plain:
        untransformed = _epoch(plain)
    assert first != second and first != untransformed and len(first) == 8


def test_float_output_of_another_shape_travels_as_it_is(colour_dataset):
    with iofeed.loader(colour_dataset, workers=1, transform=T.downscale, split="val", **SMALL) as ld:
        images, _ = next(iter(ld))
    with iofeed.loader(colour_dataset, workers=1, split="val", **SMALL) as ld:
        plain, _ = next(iter(ld))
    assert images.dtype == np.float32 and images.shape == (4, 16, 16, 3)
    assert np.array_equal(images, np.asarray(plain)[:, ::2, ::2].astype(np.float32))


def test_the_callers_random_streams_are_left_alone(colour_dataset):
    random.seed(1)
    np.random.seed(1)
    expected = (random.random(), np.random.random())
    random.seed(1)
    np.random.seed(1)
    with iofeed.loader(colour_dataset, workers=1, transform=T.jitter, batch_transform=T.roll_batch, **SMALL) as ld:
        next(iter(ld))
    assert (random.random(), np.random.random()) == expected


def test_failures_are_skipped_and_counted_with_the_transform_named(colour_dataset):
    with iofeed.loader(colour_dataset, workers=2, transform=T.flaky, drop_last=False,
                       skips=iofeed.Skips(max_skipped=None),
                       **SMALL) as ld:  # flaky fails past the default bound: counted here, bounded in test_skip_bound
        delivered = [i for indices, _ in _epoch(ld) for i in indices]
        stats = ld.stats
    kind = "transform helpers.transforms.flaky raised ValueError"
    failing, passing = _flaky_draws()
    source = iofeed.sources.samples.open_source(colour_dataset, "train")
    skipped = {example.split(f": {kind}")[0] for example in stats.skipped_examples}
    assert stats.skipped[kind] == len(failing) and len(failing) <= 20  # all of them among the examples
    assert skipped == {source.path_of(i) for i in failing}, "exactly the samples whose seeded draw failed"
    assert set(passing) <= set(delivered) and all(kind in e for e in stats.skipped_examples)
    assert stats.refilled == stats.skipped[kind] and len(delivered) == 32, "spares took the failed samples' places"


def _flaky_draws() -> tuple[list[int], list[int]]:
    """The train samples on which `T.flaky` fails and those it lets through in epoch 0 (seed 5,
    batches of 4, one rank): its draw replayed from the seeds iofeed gives each (batch, position)."""
    spec = LoaderOptions(batch_size=4, seed=5, drop_last=False).order_spec(32)
    draws: tuple[list[int], list[int]] = ([], [])
    for batch_no, indices in enumerate(spec.batches(0)):
        for position, index in enumerate(indices.tolist()):
            with preserved_globals():
                seed_globals(_seeds(BatchKey(5, 0, 0, batch_no), position, SAMPLE_STREAM)[1])
                draws[random.random() >= 0.25].append(index)
    assert draws[0] and draws[1]
    return draws


@pytest.fixture(scope="module")
def same_picture(tmp_path_factory):
    return make_same_picture_tree(tmp_path_factory.mktemp("same") / "tree")


def test_each_rank_seeds_its_own_transforms(same_picture):
    """The centre crop of one picture is the same everywhere, so the pixels differ only by what the
    transforms drew: ranks must not draw alike (nor batches), and a rerun draws the same."""
    def run(rank: int, **transforms) -> list[bytes]:
        with iofeed.loader(same_picture, batch_size=2, image_size=32, workers=1, augment=False, seed=4,
                           placement=iofeed.Placement(rank=rank, world_size=2), **transforms) as ld:
            return [image.tobytes() for images, _ in ld for image in np.array(images)]

    for transforms in ({"transform": T.noise_with_rng}, {"batch_transform": T.noisy_batch}):
        ranks = [run(0, **transforms), run(1, **transforms)]
        assert len(set(ranks[0] + ranks[1])) == 8, transforms
        assert run(1, **transforms) == ranks[1]


def test_failures_raise_naming_the_file_and_the_transform(colour_dataset):
    with iofeed.loader(colour_dataset, workers=1, transform=T.flaky, skips=iofeed.Skips(on_error="raise"),
                       **SMALL) as ld:
        with pytest.raises(SampleError) as info:
            _epoch(ld)
    message = str(info.value)
    assert re.search(r"/train-\d{6}\.tar@\d+: transform helpers\.transforms\.flaky raised ValueError \(unlucky "
                     r"sample\)", message), message
    assert "\n" not in message


def test_an_output_of_another_shape_is_an_error_naming_the_transform(colour_dataset):
    with iofeed.loader(colour_dataset, workers=1, transform=T.shape_changing, **SMALL) as ld:
        with pytest.raises(WorkerError, match="transform helpers.transforms.shape_changing returned"):
            _epoch(ld)


def test_wall_and_cpu_time_per_image_are_in_the_stats(colour_dataset):
    with iofeed.loader(colour_dataset, workers=1, transform=T.noise_with_rng, **SMALL) as ld:
        _epoch(ld)
        stats = ld.stats
    assert stats.settings["transform"] == "helpers.transforms.noise_with_rng"
    assert stats.transform_seconds > 0 and stats.transform_wall_seconds > 0
    assert stats.transform_ms_per_image == 1000 * stats.transform_wall_seconds / 32
    assert stats.transform_cpu_ms_per_image == 1000 * stats.transform_seconds / 32
    written = stats.as_dict()
    assert written["transform_ms_per_image"] == stats.transform_ms_per_image
    assert written["transform_cpu_ms_per_image"] == stats.transform_cpu_ms_per_image
    with iofeed.loader(colour_dataset, workers=1, **SMALL) as ld:
        assert ld.stats.transform_ms_per_image is None and ld.stats.transform_cpu_ms_per_image is None


class _Clock:
    """A clock that moves only when told."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_transform_time_is_wall_time_with_cpu_time_beside_it():
    """A transform blocked 3 s (on I/O, a lock) holds its worker 3 s while using no CPU: counted as
    CPU time only, it showed ~1 ms per image."""
    wall, cpu = _Clock(), _Clock()

    def blocked(image):
        wall.now += 3.0
        cpu.now += 0.001
        return image

    runner = SampleTransform(blocked, TransformedImage((8, 8, 3), np.dtype(np.uint8)), clock=wall, cpu_clock=cpu)
    for position in range(4):
        runner(np.zeros((8, 8, 3), np.uint8), BatchKey(0, 0, 0, 0), position, "x.jpg")
    assert runner.wall_seconds == 12.0 and runner.cpu_seconds == pytest.approx(0.004, abs=1e-12)


def test_a_waiting_transform_shows_its_wait_per_image_in_the_stats(colour_dataset):
    """End to end: every call sleeps WAIT_SECONDS (time.sleep waits at least that long, however busy
    the machine), so wall time per image is at least that; CPU time, a sliver of it."""
    with iofeed.loader(colour_dataset, workers=1, transform=T.waits, split="val", **SMALL) as ld:
        _epoch(ld)
        stats = ld.stats
    floor = 1000 * T.WAIT_SECONDS
    assert stats.images == 8 and stats.transform_ms_per_image >= floor
    assert stats.transform_cpu_ms_per_image < floor


def _local(image):
    return image


BAD = [
    ({"transform": lambda image: image}, "lambda cannot be pickled"),
    ({"transform": _local}, "defined in __main__"),
    ({"transform": 3}, "transform=3 is not callable"),
    ({"transform": T.downscale, "engine": "dali"}, "engine='workers'"),
    ({"transform": T.jitter, "gpu_augment": True, "framework": "torch"}, "gpu_augment"),
    ({"transform": functools.partial(T.shape_changing)}, None),  # a partial of an importable function is fine
    ({"batch_transform": "mixup"}, "batch_transform='mixup' is not callable"),
    ({"transform": np.sum}, "returned () uint64"),
    ({"transform": T.exits}, "transform=helpers.transforms.exits failed on a 32x32x3 uint8 image: transform "
                             "helpers.transforms.exits called sys.exit(3): a transform must return the image"),
    ({"transform": T.rgba}, "returned (32, 32, 4): 4 channels (RGBA?) for a 32x32x3 uint8 image: return 3 channels"),
    ({"transform": T.chw}, "returned CHW (3, 32, 32) for a 32x32x3 uint8 image: return HWC (32, 32, 3)"),
    ({"transform": T.grey}, "returned (32, 32): one channel (greyscale) for a 32x32x3 uint8 image"),
    pytest.param({"transform": T.torch_hwc}, "a torch tensor shaped (32, 32, 3), which is HWC",
                 marks=pytest.mark.torch),
]


@pytest.mark.parametrize("options, named", BAD, ids=lambda v: repr(v) if isinstance(v, dict) else None)
def test_bad_transforms_are_one_line_errors_before_any_work(colour_dataset, monkeypatch, options, named):
    monkeypatch.setattr(_local, "__module__", "__main__")
    before = slot_memory()
    if named is None:
        iofeed.loader(colour_dataset, workers=1, **options, **SMALL).close()
        return
    with pytest.raises(OptionError) as info:
        iofeed.loader(colour_dataset, workers=1, **options, **SMALL)
    assert named in str(info.value) and "\n" not in str(info.value)
    assert slot_memory() == before


def test_auto_picks_workers_for_a_transform_and_says_so(colour_dataset, monkeypatch):
    monkeypatch.setattr(select, "gpu_present", lambda: True)
    monkeypatch.setattr(select, "_installed", lambda module: True)
    monkeypatch.setattr(gpu_nvml, "visible_gpu_count", lambda: 1)  # LoaderOptions resolves device= against it
    options = LoaderOptions(batch_size=4, placement=iofeed.Placement(device="cuda:0"), transform=T.jitter)
    source = iofeed.sources.samples.open_source(colour_dataset, "train")
    assert select.engine_name(options, source) == "workers"
    assert select.engine_name(LoaderOptions(batch_size=4, placement=iofeed.Placement(device="cuda:0")),
                              source) == "nvjpeg"  # never dali
    with iofeed.loader(colour_dataset, workers=1, transform=T.jitter, **SMALL) as ld:
        assert any("transform= runs only in worker processes" in d for d in ld.stats.settings["decisions"])


def test_batch_transform_is_seeded_per_batch(colour_dataset):
    runs = []
    for workers in (1, 2):
        with iofeed.loader(colour_dataset, workers=workers, batch_transform=T.roll_batch, **SMALL) as ld:
            runs.append(_epoch(ld))
    with iofeed.loader(colour_dataset, workers=1, **SMALL) as ld:
        plain = _epoch(ld)
    assert runs[0] == runs[1] and runs[0] != plain


@pytest.mark.parametrize("framework", ["numpy", pytest.param("torch", marks=pytest.mark.torch)])
@pytest.mark.parametrize("transform, named", [
    (T.images_only, "of shape (2, "),  # was delivered as (images[0], images[1])
    (T.half_images, "1 images and 2 labels for a batch of 2: return (images, labels), one label (row) per image"),
    (T.returns_none, "None for a batch of 2, not a pair: return (images, labels)"),
])
def test_a_batch_transform_result_of_another_form_is_an_error_naming_it(colour_dataset, framework, transform, named):
    with iofeed.loader(colour_dataset, workers=1, batch_size=2, image_size=32, framework=framework,
                       batch_transform=transform) as ld:
        with pytest.raises(OptionError) as info:
            next(iter(ld))
    message = str(info.value)
    assert message.startswith(f"batch_transform=helpers.transforms.{transform.__name__} returned ")
    assert named in message and "\n" not in message


@pytest.mark.tf
def test_a_tf_batch_transform_result_of_another_form_is_an_error_naming_it(colour_dataset):
    """In the tf dataset the form is checked when the dataset is made (the function is traced
    then), the lengths on every batch."""
    import tensorflow as tf

    options = {"workers": 1, "batch_size": 2, "image_size": 32, "framework": "tf"}
    for transform, named in ((T.images_only, "SymbolicTensor of shape (None, 32, 32, 3), not a pair"),
                             (T.returns_none, "None, not a pair")):
        with pytest.raises(OptionError) as info:
            iofeed.loader(colour_dataset, batch_transform=transform, **options)
        assert str(info.value) == (f"batch_transform=helpers.transforms.{transform.__name__} returned {named}: "
                                   "return (images, labels), one label (row) per image")
    ds = iofeed.loader(colour_dataset, batch_transform=T.half_images, **options)
    try:
        with pytest.raises(tf.errors.InvalidArgumentError, match="batch_transform=helpers.transforms.half_images "
                           "returned images or labels of another length than the batch"):
            next(iter(ds))
    finally:
        ds.iofeed_loader.close()


@pytest.mark.torch
@pytest.mark.torchvision
def test_torchvision_mixup_cutmix_on_the_batch_where_it_ends_up(colour_dataset):
    """MixUp/CutMix from torchvision v2: soft labels, the same for 1 and 2 workers, seeded per batch."""
    import torch
    from torchvision.transforms import v2

    mix = v2.RandomChoice([v2.MixUp(num_classes=4), v2.CutMix(num_classes=4)])
    runs = []
    for workers in (1, 2):
        with iofeed.loader(colour_dataset, workers=workers, framework="torch", batch_transform=mix, **SMALL) as ld:
            runs.append([(images.clone(), labels.clone()) for images, labels in ld])
    assert len(runs[0]) == 8
    for (a, la), (b, lb) in zip(*runs, strict=True):
        assert torch.equal(a, b) and torch.equal(la, lb)
        assert la.shape == (4, 4) and la.dtype == torch.float32 and torch.allclose(la.sum(1), torch.ones(4))
    assert any(not torch.equal(la, la.round()) for _, la in runs[0]), "some labels were mixed"


@pytest.mark.tf
def test_tf_batch_transform_runs_in_the_dataset_with_a_per_batch_seed(colour_dataset):
    import tensorflow as tf

    def flip(images, labels, seed):
        return tf.image.stateless_random_flip_left_right(images, seed), labels

    def batches(**options):
        ds = iofeed.loader(colour_dataset, workers=1, framework="tf", split="val", **SMALL, **options)
        try:
            return [images.numpy() for images, _ in ds]
        finally:
            ds.iofeed_loader.close()

    plain, flipped, again = batches(), batches(batch_transform=flip), batches(batch_transform=flip)
    assert len(plain) == 2 and all(np.array_equal(a, b) for a, b in zip(flipped, again, strict=True))
    images = [(f, p) for fb, pb in zip(flipped, plain, strict=True) for f, p in zip(fb, pb, strict=True)]
    mirrored = [np.array_equal(f, p[:, ::-1]) for f, p in images]
    assert all(m or np.array_equal(f, p) for (f, p), m in zip(images, mirrored)), "each image mirrored or kept"
    assert 0 < sum(mirrored) < len(images)
    uint8 = batches(augment="uint8")
    assert uint8[0].dtype == np.uint8 and uint8[0].shape == (4, 32, 32, 3)


@pytest.mark.torchvision
def test_torchvision_chw_output_is_stored_as_hwc(colour_dataset):
    """v2.ToImage() gives a CHW tv_tensors.Image: an identity transform must give iofeed's own pixels."""
    from torchvision.transforms import v2

    with iofeed.loader(colour_dataset, workers=1, transform=v2.Compose([v2.ToImage()]), split="val", **SMALL) as ld:
        mine = [np.array(images) for images, _ in ld]
        assert ld.stats.settings["transform"] == "Compose"
    with iofeed.loader(colour_dataset, workers=1, split="val", **SMALL) as ld:
        plain = [np.array(images) for images, _ in ld]
    assert len(mine) == 2 and all(np.array_equal(a, b) for a, b in zip(mine, plain, strict=True))


@pytest.mark.albumentations
def test_albumentations_compose_is_seeded_through_its_own_generators(colour_dataset):
    import albumentations as A

    jitter = A.Compose([A.ColorJitter(p=1.0), A.CoarseDropout(p=0.5)])
    runs = []
    for workers in (1, 2):
        with iofeed.loader(colour_dataset, workers=workers, transform=jitter, **SMALL) as ld:
            runs.append(_epoch(ld))
    with iofeed.loader(colour_dataset, workers=1, **SMALL) as ld:
        plain = _epoch(ld)
    assert len(runs[0]) == 8 and runs[0] == runs[1] and runs[0] != plain
    assert len({pixels for _, pixels in runs[0]}) == 8


def _device_noise(images, labels):
    """A batch transform that draws on the device: CUDA's generator, not the CPU's."""
    import torch

    return images + torch.randn(images.shape, device=images.device), labels


@pytest.mark.gpu
@pytest.mark.torch
def test_a_batch_transform_drawing_on_the_gpu_is_seeded_per_batch_whatever_the_worker_count(colour_dataset):
    """MixUp/CutMix draw on the CPU, so nothing else checks that the CUDA generator is seeded from the
    batch key: the same noise with 1 and 2 workers, different noise per batch, none without seeding."""
    import torch

    torch.cuda.manual_seed(7)
    expected = torch.rand(3, device="cuda")
    torch.cuda.manual_seed(7)
    runs = []
    for workers in (1, 2):
        with iofeed.loader(colour_dataset, workers=workers, framework="torch",
                           placement=iofeed.Placement(device="cuda"),
                           batch_transform=_device_noise, **SMALL) as ld:
            runs.append([(images.cpu(), labels.cpu()) for images, labels in ld])
    with iofeed.loader(colour_dataset, workers=1, framework="torch", placement=iofeed.Placement(device="cuda"),
                       **SMALL) as ld:
        plain = [images.cpu() for images, _ in ld]
    assert torch.equal(torch.rand(3, device="cuda"), expected)  # the caller's CUDA stream of numbers
    assert len(runs[0]) == len(plain) >= 4
    assert all(torch.equal(a, b) and torch.equal(la, lb) for (a, la), (b, lb) in zip(*runs, strict=True))
    noise = [images - clean for (images, _), clean in zip(runs[0], plain)]
    assert all(0.5 < float(n.std()) < 1.5 for n in noise)  # standard normal noise was added
    assert not torch.equal(noise[0], noise[1])  # each batch draws its own


@pytest.mark.gpu
@pytest.mark.torchvision
def test_batch_transform_on_the_gpu_is_seeded_and_leaves_the_callers_cuda_rng_alone(colour_dataset):
    import torch
    from torchvision.transforms import v2

    mix = v2.RandomChoice([v2.MixUp(num_classes=4), v2.CutMix(num_classes=4)])
    torch.cuda.manual_seed(1)
    expected = torch.rand(3, device="cuda")
    torch.cuda.manual_seed(1)
    runs = []
    for workers in (1, 2):
        with iofeed.loader(colour_dataset, workers=workers, framework="torch",
                           placement=iofeed.Placement(device="cuda"), batch_transform=mix,
                           **SMALL) as ld:
            runs.append([(images.cpu(), labels.cpu()) for images, labels in ld])
    assert torch.equal(torch.rand(3, device="cuda"), expected)
    assert all(torch.equal(a, b) and torch.equal(la, lb) for (a, la), (b, lb) in zip(*runs, strict=True))
    assert runs[0][0][1].shape == (4, 4) and runs[0][0][0].is_floating_point()
