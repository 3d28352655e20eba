"""Raw-pixel datasets (`--format raw|mixed`): exact stored pixels, decode-free loading with the
loader contract intact, and `gpu_augment` (run here on the CPU device)."""
from __future__ import annotations

import hashlib
import os
from pathlib import Path

import numpy as np
import pytest

import iofeed
from helpers.images import label_from_pixels
from helpers.runs import state_after
from iofeed.cli.main import main
from iofeed.errors import OptionError, WorkerError
from iofeed.format.manifest import Manifest
from iofeed.format.table import RAW, load_sources
from iofeed.image.pil import open_rgb, resize_shorter
from iofeed.prepare.run import ImagePolicy, preprocess
from iofeed.sources.sample_reader import SampleReader
from iofeed.sources.samples import open_source

MIXED_THRESHOLD = 30_000  # the colour tree's stored images span 22,400–46,536 pixels


@pytest.fixture(scope="session")
def raw_dataset(colour_tree: Path, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("colour-raw") / "raw.iof"
    preprocess(colour_tree, out, policy=ImagePolicy(format="raw"), val_per_class=2, shard_bytes=1 << 18,
               progress=False, workers=1)
    return out


@pytest.fixture(scope="session")
def mixed_dataset(colour_tree: Path, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("colour-mixed") / "mixed.iof"
    preprocess(colour_tree, out, policy=ImagePolicy(format="mixed", raw_max_pixels=MIXED_THRESHOLD),
               val_per_class=2, shard_bytes=1 << 18, progress=False, workers=1)
    return out


def _digests(ld) -> list[str]:
    return [hashlib.sha256(np.ascontiguousarray(images)).hexdigest() for images, _ in ld]


def test_raw_samples_are_the_resized_source_pixels(quirky_tree, tmp_path):
    """Every stored sample equals the source decoded to RGB and resized, byte for byte."""
    src, valid, _ = quirky_tree
    out = tmp_path / "q.iof"
    preprocess(src, out, policy=ImagePolicy(shorter_side=64, format="raw"), progress=False, workers=1)
    root = src / "256_ObjectCategories"
    checked = 0
    for split in Manifest.read(out).splits:
        source = open_source(out, split)
        reader = SampleReader(source)
        for index, rel in enumerate(load_sources(out / f"{split}-samples.npy")):
            expected = np.asarray(resize_shorter(open_rgb((root / rel).read_bytes(), min_size=(64, 64)).image, 64))
            assert source.encoding[index] == RAW
            assert np.array_equal(reader.pixels(index), expected), rel
            checked += 1
        reader.close()
    assert checked == len(valid)


def test_mixed_stores_small_images_raw_and_reports_sizes(mixed_dataset, capsys):
    source = open_source(mixed_dataset, "train")
    pixels = source.width.astype(int) * source.height
    assert np.array_equal(source.encoding == RAW, pixels <= MIXED_THRESHOLD)
    assert 0 < (source.encoding == RAW).sum() < len(source)
    manifest = Manifest.read(mixed_dataset)
    assert manifest.image["encoding"] == "mixed" and manifest.image["raw_max_pixels"] == MIXED_THRESHOLD
    stored = manifest.source["stored"]
    assert stored["samples"]["raw"] + stored["samples"]["jpeg"] == 40
    assert stored["bytes"]["raw"] + stored["bytes"]["jpeg"] > stored["as_jpeg_bytes_estimate"] > stored["bytes"]["jpeg"]
    assert main(["inspect", str(mixed_dataset)]) == 0
    assert "as JPEG" in capsys.readouterr().out


@pytest.mark.parametrize("which", ["raw", "mixed"])
def test_counts_labels_and_worker_independence(raw_dataset, mixed_dataset, which):
    source = raw_dataset if which == "raw" else mixed_dataset
    runs = []
    for workers in (1, 2):
        with iofeed.loader(source, batch_size=4, workers=workers, seed=3, drop_last=False) as ld:
            seen = []
            for images, labels in ld:
                assert images.shape[1:] == (224, 224, 3) and images.dtype == np.uint8
                assert [label_from_pixels(image) for image in images] == labels.tolist()
                seen.extend(ld.last_indices.tolist())
            assert sorted(seen) == list(range(len(ld.source))) and ld.stats.images == len(seen)
        with iofeed.loader(source, batch_size=4, workers=workers, seed=3) as ld:
            ld.set_epoch(1)
            runs.append(_digests(ld))
    assert runs[0] == runs[1]


def test_resume_mid_epoch_on_raw(raw_dataset):
    with iofeed.loader(raw_dataset, batch_size=4, workers=2, seed=9) as ld:
        full = _digests(ld)
        ld.set_epoch(0)
        state = state_after(ld, 2)
    with iofeed.loader(raw_dataset, batch_size=4, workers=1, seed=9) as resumed:
        resumed.load_state_dict(state)
        assert _digests(resumed) == full[2:]


def test_raw_and_jpeg_datasets_give_the_same_pictures(raw_dataset, colour_dataset):
    """Same samples and crops; only the JPEG's compression error differs."""
    runs = {}
    for name, source in (("raw", raw_dataset), ("jpeg", colour_dataset)):
        with iofeed.loader(source, batch_size=4, workers=1, seed=2, drop_last=False) as ld:
            runs[name] = [(ld.last_indices.copy(), images.astype(np.float64)) for images, _ in ld]
    assert len(runs["raw"]) == 8  # 32 training samples in batches of 4
    for (i_raw, raw), (i_jpeg, jpeg) in zip(runs["raw"], runs["jpeg"], strict=True):
        assert np.array_equal(i_raw, i_jpeg)
        assert np.abs(raw - jpeg).mean() < 3.0


def test_truncated_raw_shard_is_skipped_and_counted(tmp_path, colour_tree):
    out = tmp_path / "t.iof"
    preprocess(colour_tree, out, policy=ImagePolicy(format="raw"), val_per_class=2, progress=False, workers=1)
    shard = out / Manifest.read(out).splits["train"].shards[0]["name"]
    with iofeed.loader(out, batch_size=4, workers=1, drop_last=False, skips=iofeed.Skips(max_skipped=None)) as ld:
        shard.write_bytes(shard.read_bytes()[: shard.stat().st_size // 2])  # after open: before, open refuses it
        delivered = sum(len(labels) for _, labels in ld)
        skipped = sum(ld.stats.skipped.values())
        refilled = ld.stats.refilled  # spares that took skipped samples' places (those that could be read)
    assert skipped > 0 and delivered + skipped - refilled == len(ld.source)


@pytest.mark.torch
@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=pytest.mark.gpu)])
@pytest.mark.parametrize("train", [True, False])
def test_gpu_augment_matches_the_cpu_path(mixed_dataset, train, device):
    """Same samples, boxes and flips as CPU augmentation (on the CPU), run on `device`: the pictures
    agree but for resampling."""
    import torch
    runs = {}
    for gpu_augment, where in ((False, "cpu"), (True, device)):
        with iofeed.loader(mixed_dataset, batch_size=4, workers=2, seed=6, augment=train, framework="torch",
                           placement=iofeed.Placement(device=where), gpu_augment=gpu_augment, drop_last=False) as ld:
            runs[gpu_augment] = []
            for images, labels in ld:
                assert images.device.type == labels.device.type == torch.device(where).type
                runs[gpu_augment].append((ld.last_indices.copy(), images.to("cpu", copy=True),
                                          labels.to("cpu", copy=True)))
    assert len(runs[True]) == len(runs[False]) == 8  # 32 train samples
    for (i_gpu, on_device, l_gpu), (i_cpu, cpu, l_cpu) in zip(runs[True], runs[False], strict=True):
        assert np.array_equal(i_gpu, i_cpu) and torch.equal(l_gpu, l_cpu)
        assert on_device.shape == cpu.shape == (4, 3, 224, 224)
        assert on_device.is_contiguous()
        blocks = [torch.nn.functional.avg_pool2d(x, 8) for x in (on_device, cpu)]  # another box or flip: far apart
        assert (blocks[0] - blocks[1]).abs().mean() < 0.05


@pytest.mark.torch
def test_gpu_augment_flip_and_box_are_exact_on_a_gradient():
    """A known image and box: the resized crop and its mirror, checked value by value."""
    import torch

    from iofeed.adapters.torch.gpu_augment import crop_resize_chunks

    def crop_resize_packed(data, meta, side):
        chunks = list(crop_resize_chunks(data, meta, side, budget=1))  # one image per chunk
        assert [rows for rows, _ in chunks] == [slice(0, 1), slice(1, 2)]
        return torch.cat([pixels for _, pixels in chunks])

    height, width = 6, 8
    image = np.arange(height * width * 3, dtype=np.uint8).reshape(height, width, 3)
    data = torch.from_numpy(np.concatenate([np.zeros(5, np.uint8), image.reshape(-1)]))
    meta = {"offset": torch.tensor([5, 5]), "height": torch.tensor([height] * 2), "width": torch.tensor([width] * 2),
            "box": torch.tensor([[2.0, 1.0, 6.0, 5.0]] * 2), "flip": torch.tensor([False, True])}
    out = crop_resize_packed(data, meta, side=4).numpy()
    assert np.allclose(out[0], image[1:5, 2:6])  # a same-size crop is a copy
    assert np.allclose(out[1], image[1:5, 2:6][:, ::-1])
    half = crop_resize_packed(data, {**meta, "box": torch.tensor([[0.0, 0.0, 8.0, 6.0]] * 2)}, side=2).numpy()
    rows = image[[1, 4]].astype(float)  # y = 1.0 and 4.0; x = 1.5 and 5.5: the mean of two neighbours
    assert np.allclose(half[0], 0.5 * (rows[:, [1, 5]] + rows[:, [2, 6]]))


@pytest.mark.torch
def test_gpu_augment_temporaries_stay_bounded_at_a_real_batch():
    """B=64 stored 256x320 images cropped to 224 px, on the CPU (the same kernels as on the GPU): the
    temporaries the crop makes stay within its budget, with int32 indices. The single gather of the
    whole batch held int64 indices per value (77 MB for one corner here, 308 MB at B=256) and about
    four times that in all."""
    import torch

    from helpers.torch_ops import PeakTemporaries
    from iofeed.adapters.torch.gpu_augment import GATHER_BYTES, crop_resize_chunks

    batch, height, width, side = 64, 256, 320, 224
    rng = np.random.default_rng(0)
    data = torch.from_numpy(rng.integers(0, 256, batch * height * width * 3, dtype=np.uint8))
    left, top = rng.uniform(0, 60, batch), rng.uniform(0, 30, batch)
    meta = {"offset": torch.arange(batch) * height * width * 3, "height": torch.full((batch,), height),
            "width": torch.full((batch,), width), "flip": torch.from_numpy(rng.random(batch) < 0.5),
            "box": torch.from_numpy(np.stack([left, top, left + 250, top + 220], 1).astype(np.float32))}
    sums = torch.zeros(batch)
    with PeakTemporaries() as held:
        for rows, pixels in crop_resize_chunks(data, meta, side):
            sums[rows] = pixels.sum(dim=(1, 2, 3))
            del pixels
    assert held.peak <= GATHER_BYTES, f"{held.peak / 2**20:.0f} MiB of temporaries"
    large = {dtype for dtype, numel in held.dtypes if numel >= batch * side}
    assert torch.int64 not in large and torch.int32 in large, large
    image = data[: height * width * 3].view(height, width, 3).float()  # the first image's mean, roughly kept
    assert abs(sums[0].item() / (side * side * 3) - image.mean().item()) < 3


def test_bad_options_for_raw(raw_dataset, colour_tree, tmp_path):
    with pytest.raises(OptionError, match="gpu_augment"):
        iofeed.loader(raw_dataset, batch_size=4, gpu_augment=True)  # numpy framework
    with pytest.raises(OptionError, match="iofeed dataset"):
        iofeed.loader(colour_tree, batch_size=4, framework="torch", gpu_augment=True)
    with pytest.raises(OptionError, match="raw-max-pixels"):
        preprocess(colour_tree, tmp_path / "x.iof", policy=ImagePolicy(format="mixed", raw_max_pixels=0))
    with pytest.raises(SystemExit):
        main(["preprocess", str(colour_tree), "-o", str(tmp_path / "y.iof"), "--format", "png"])


@pytest.mark.dali
def test_dali_refuses_raw_datasets(raw_dataset):
    with pytest.raises(OptionError, match="raw pixels"):
        iofeed.loader(raw_dataset, batch_size=4, engine="dali")


def test_a_shard_truncated_under_a_live_loader_is_named(tmp_path, colour_tree):
    """Issue 22.17: a worker reading a mapped shard that shrank dies with SIGBUS; the error names it."""
    out = tmp_path / "t.iof"
    preprocess(colour_tree, out, policy=ImagePolicy(format="raw"), val_per_class=2, progress=False, workers=1)
    shards = Manifest.read(out).splits["train"].shards
    assert len(shards) == 1
    shard = out / shards[0]["name"]
    with iofeed.loader(out, batch_size=2, workers=1, resources=iofeed.Resources(prefetch=1), image_size=16) as ld:
        batches = iter(ld)
        next(batches)  # the worker has the shard mapped
        os.truncate(shard, 1024)
        with pytest.raises(WorkerError) as info:
            list(batches)
    message = str(info.value)
    assert "died with signal SIGBUS" in message and f"{shard} is now 1,024 bytes" in message
    assert "truncated while the loader read it" in message and "\n" not in message
