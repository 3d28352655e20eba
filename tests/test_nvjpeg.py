"""The nvjpeg engine beyond the contract (tests/test_contract.py): its pixels against the workers
engine's on the same crops, the images its workers finish themselves, a JPEG the batched decoder
refuses, every adapter, and (marked `gpu`) the same on a CUDA device."""
from __future__ import annotations

import functools
import os
import tarfile

import numpy as np
import pytest

import iofeed
from helpers.agreement import level_differences, summary
from helpers.contract import CHECKS, ContractData
from helpers.images import exif_rotated_jpeg, jpeg_bytes, label_from_pixels, png_bytes, smooth_rgb
from iofeed.errors import SampleError

pytestmark = pytest.mark.torchvision
# The workers engine's exact decode: the nvjpeg engine has no fast IDCT (`fast_decode` is a permission
# an engine without one ignores), so with it the resize is the only difference left.
EXACT_TRAIN, EXACT_EVAL = iofeed.Recipe(fast_decode=False), iofeed.Recipe(train=False, fast_decode=False)
# What docs/benchmarks.md ("The nvjpeg engine's pixels") measured on the Caltech-256 stand-in at 224
# px, CPU form: random-resized crops mean 0.18 levels, 99% within 1; evaluation mean 0.07. The bounds
# leave room for other pictures, not for another crop (a box off by one pixel gives means of 5-20).
MEAN_BOUND, P99_BOUND = 0.5, 2.0


@pytest.fixture(scope="module")
def smooth_dataset(tmp_path_factory):
    """Photo-like JPEGs of 180-420 px (4 classes x 8), preprocessed (shorter side 256 at most)."""
    from iofeed.prepare.run import preprocess

    root = tmp_path_factory.mktemp("smooth") / "tree"
    rng = np.random.default_rng(0)
    for c in range(4):
        (root / f"c{c}").mkdir(parents=True)
        for i in range(8):
            size = int(rng.integers(180, 420)), int(rng.integers(180, 420))
            (root / f"c{c}" / f"{i}.jpg").write_bytes(jpeg_bytes(smooth_rgb(*size, c * 100 + i)))
    out = root.parent / "smooth.iof"
    preprocess(root, out, val_per_class=0, progress=False, workers=1)
    return out


@pytest.mark.slow
@pytest.mark.parametrize("augment", [EXACT_TRAIN, EXACT_EVAL], ids=["random-resized-crop", "evaluation"])
def test_pixels_agree_with_the_workers_engine_on_the_same_crops(smooth_dataset, augment):
    diff = level_differences(smooth_dataset, "nvjpeg", 100, batch_size=8, image_size=224, seed=3, workers=1,
                             augment=augment, drop_last=False)
    found = summary(diff)
    assert found["images"] == 32
    assert found["mean"] <= MEAN_BOUND and found["p99"] <= P99_BOUND, found


@pytest.fixture
def quirky_folder(tmp_path):
    """Two classes of plain JPEGs, with images a GPU decoder would not decode as Pillow does:
    progressive, CMYK, EXIF-rotated, PNG (the workers finish those)."""
    root = tmp_path / "quirks"
    for c in ("a", "b"):
        (root / c).mkdir(parents=True)
        for i in range(5):
            (root / c / f"{i}.jpg").write_bytes(jpeg_bytes(smooth_rgb(120 + 9 * i, 100, i)))
    quirks = {"a/progressive.jpg": jpeg_bytes(smooth_rgb(130, 110, 7), progressive=True),
              "a/cmyk.jpg": jpeg_bytes(smooth_rgb(140, 100, 8).convert("CMYK")),
              "b/rotated.jpg": exif_rotated_jpeg(smooth_rgb(150, 100, 9), orientation=6),
              "b/picture.png": png_bytes(smooth_rgb(110, 120, 10))}
    for name, data in quirks.items():
        (root / name).write_bytes(data)
    return root, quirks


def test_images_a_gpu_would_decode_otherwise_are_finished_by_the_workers(quirky_folder):
    """Their pixels are the workers engine's, exactly: the same code, the same draws."""
    root, quirks = quirky_folder
    runs = {}
    for engine in ("workers", "nvjpeg"):
        with iofeed.loader(root, engine=engine, batch_size=4, image_size=64, seed=2, workers=1,
                           drop_last=False) as ld:
            runs[engine] = {int(i): image for images, _ in ld for i, image in zip(ld.last_indices, images)}
            names = [os.path.relpath(ld.source.path_of(i), root) for i in range(len(ld.source))]
            stats = ld.stats.settings
    quirky = [i for i, name in enumerate(names) if name in quirks]
    assert len(quirky) == len(quirks) and stats["finished_by_workers"] == len(quirks)
    for i in quirky:
        assert np.array_equal(runs["nvjpeg"][i], runs["workers"][i]), names[i]


def _jpeg_tensor(data: bytes):
    import torch

    return torch.frombuffer(bytearray(data), dtype=torch.uint8)


def test_a_batch_with_a_broken_jpeg_decodes_the_others_and_names_the_broken_one():
    """One call fails whole on one bad image: the others come back image by image, the bad one (its
    Huffman tables overwritten) with the CPU path's reason."""
    from iofeed.engines.nvjpeg.decoders import batch_decoder, decode_batch

    good = [jpeg_bytes(smooth_rgb(64, 48, seed)) for seed in (1, 2)]
    broken = bytearray(good[0])
    at = broken.index(b"\xff\xc4") + 5
    broken[at:at + 30] = b"\xff" * 30
    _, decode = batch_decoder(("torchvision",))
    done = decode_batch([_jpeg_tensor(good[0]), _jpeg_tensor(bytes(broken)), _jpeg_tensor(good[1])], "cpu", decode)
    alone = decode([_jpeg_tensor(g) for g in good], "cpu")
    assert done.images[1] is None and "corrupt or truncated" in done.reasons[1] and done.on_cpu == 0
    assert all(np.array_equal(done.images[k].numpy(), alone[j].numpy()) for k, j in ((0, 0), (2, 1)))


def test_a_jpeg_the_decoder_refuses_is_decoded_by_the_cpu_path():
    """A decoder that refuses greyscale JPEGs (as a hardware decoder may refuse a layout): that image
    is decoded by the workers engine's CPU path, the rest by the decoder."""
    from iofeed.engines.nvjpeg.decoders import batch_decoder, cpu_pixels, decode_batch

    _, real = batch_decoder(("torchvision",))

    def refusing(data, device):
        if any(bytes(d[:4096].numpy()).count(b"\xff\xc0\x00\x0b") for d in data):  # a 1-component frame
            raise RuntimeError("refused")
        return real(data, device)

    grey = jpeg_bytes(smooth_rgb(64, 48, 3).convert("L"))
    colour = jpeg_bytes(smooth_rgb(64, 48, 4))
    done = decode_batch([_jpeg_tensor(colour), _jpeg_tensor(grey)], "cpu", refusing)
    assert done.on_cpu == 1 and not done.reasons
    assert np.array_equal(done.images[1].permute(1, 2, 0).numpy(), cpu_pixels(grey))
    assert np.array_equal(done.images[0].numpy(), real([_jpeg_tensor(colour)], "cpu")[0].numpy())


def _damage_in_place(dataset, member_index: int) -> None:
    """Overwrite the Huffman tables of the shard's `member_index`-th JPEG, in place, same size (a
    disk error after preprocess: its checks passed, the index still matches)."""
    (shard,) = sorted(dataset.glob("train-*.tar"))
    with tarfile.open(shard) as tar:
        members = [m for m in tar.getmembers() if m.name.endswith(".jpg")]
    member = members[member_index]
    with open(shard, "r+b") as f:
        f.seek(member.offset_data)
        data = bytearray(f.read(member.size))
        at = data.index(b"\xff\xc4") + 5
        data[at:at + 30] = b"\xff" * 30
        f.seek(member.offset_data)
        f.write(data)


@pytest.fixture
def damaged_dataset(colour_tree, tmp_path):
    from iofeed.prepare.run import preprocess

    out = tmp_path / "damaged.iof"
    preprocess(colour_tree, out, val_per_class=0, progress=False, workers=1)
    _damage_in_place(out, 3)
    return out


def test_a_jpeg_damaged_after_preprocess_is_skipped_at_the_decode(damaged_dataset):
    """Nothing checks a validated dataset's images again before the decode: the decode skips it,
    counted with its path (its batch is one short: its place cannot be refilled there)."""
    with iofeed.loader(damaged_dataset, engine="nvjpeg", batch_size=4, image_size=32, workers=1,
                       drop_last=False, shuffle=False) as ld:
        sizes = [len(labels) for images, labels in ld if
                 [label_from_pixels(i) for i in images] == np.asarray(labels).tolist()]
        stats = ld.stats
    assert len(sizes) == len(ld) and sorted(sizes)[0] == 3 and sum(sizes) == len(ld.source) - 1
    assert sum(stats.skipped.values()) == 1 and stats.settings["failed_at_decode"] == 1
    assert "corrupt or truncated" in stats.skipped_examples[0]


def test_a_jpeg_damaged_after_preprocess_raises_naming_it(damaged_dataset):
    with iofeed.loader(damaged_dataset, engine="nvjpeg", batch_size=4, image_size=32, workers=1,
                       skips=iofeed.Skips(on_error="raise"), shuffle=False) as ld:
        with pytest.raises(SampleError, match=r"\.tar.*corrupt or truncated.*on_error='skip'"):
            list(ld)


FRAMEWORKS = [pytest.param("numpy"), pytest.param("torch", marks=pytest.mark.torch),
              pytest.param("tf", marks=pytest.mark.tf), pytest.param("jax", marks=pytest.mark.jax),
              pytest.param("keras", marks=[pytest.mark.keras, pytest.mark.tf])]


def _as_numpy(images) -> np.ndarray:
    if hasattr(images, "detach"):
        images = images.detach().cpu()
    return np.asarray(images, np.float32)


@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_every_adapter_takes_its_batches_like_the_workers_engines(colour_dataset, framework):
    """The same shapes, dtypes and labels as the workers engine's batches, values within a few levels
    (32 px crops of larger pictures: the two reductions differ most there)."""
    got = {}
    for engine in ("workers", "nvjpeg"):
        made = iofeed.loader(colour_dataset, engine=engine, framework=framework, batch_size=4, image_size=32,
                             workers=1, seed=1)
        loader = getattr(made, "iofeed_loader", made)
        with loader:
            images, labels = next(iter(made))
            got[engine] = (_as_numpy(images), np.asarray(labels), str(getattr(images, "dtype", "")))
    (w_images, w_labels, w_dtype), (n_images, n_labels, n_dtype) = got["workers"], got["nvjpeg"]
    assert n_images.shape == w_images.shape and n_dtype == w_dtype and np.array_equal(n_labels, w_labels)
    scale = 1.0 if w_images.max() > 3 else 1 / 255 / 0.224  # 0-255 values, or normalised (a level ~0.0175)
    diff = np.abs(n_images - w_images) / scale
    assert diff.mean() <= 1.0 and diff.max() <= 8.01, (diff.mean(), diff.max())


# ---- the same on a CUDA device (scripts/gpu-session.sh runs them)

@pytest.mark.gpu
@pytest.mark.parametrize("check", CHECKS, ids=lambda c: c.__name__.removeprefix("check_"))
def test_engine_contract_on_cuda(colour_dataset, colour_tree, tmp_path, check):
    check(functools.partial(iofeed.loader, engine="nvjpeg", placement=iofeed.Placement(device="cuda")),
          ContractData(colour_dataset, colour_tree, tmp_path))


@pytest.mark.gpu
@pytest.mark.torch
def test_cuda_batches_stay_on_the_device_for_torch(colour_dataset):
    import torch

    with iofeed.loader(colour_dataset, engine="nvjpeg", framework="torch", placement=iofeed.Placement(device="cuda"),
                       batch_size=4,
                       image_size=32, workers=1, augment="uint8") as ld:
        images, labels = next(iter(ld))
        assert ld.stats.settings["device"].startswith("cuda") and images.is_cuda
        nhwc = images.permute(0, 2, 3, 1).cpu().numpy()
        assert [label_from_pixels(i) for i in nhwc] == labels.cpu().tolist()
    assert torch.cuda.is_available()


@pytest.mark.gpu
@pytest.mark.parametrize("augment", [EXACT_TRAIN, EXACT_EVAL], ids=["random-resized-crop", "evaluation"])
def test_cuda_pixels_agree_with_the_workers_engine(smooth_dataset, augment):
    """nvJPEG's IDCT and chroma upsampling differ from libjpeg-turbo's by a few levels (DALI's did by
    5-7 at most on an H100): bounded looser than the CPU form, and printed for docs/benchmarks.md."""
    diff = level_differences(smooth_dataset, "nvjpeg", 100, batch_size=8, image_size=224, seed=3, workers=1,
                             augment=augment, drop_last=False, device="cuda")
    found = summary(diff)
    print("nvjpeg on cuda against workers:", found)
    assert found["mean"] <= 2.0 and found["p99"] <= 8, found


@pytest.mark.gpu
def test_a_jpeg_damaged_after_preprocess_is_skipped_on_cuda(damaged_dataset):
    with iofeed.loader(damaged_dataset, engine="nvjpeg", placement=iofeed.Placement(device="cuda"), batch_size=4,
                       image_size=32,
                       workers=1, drop_last=False, shuffle=False) as ld:
        delivered = sum(len(labels) for _, labels in ld)
        stats = ld.stats
    assert delivered == len(ld.source) - 1 and sum(stats.skipped.values()) == 1


def test_a_crop_at_a_smaller_images_edge_takes_its_edge_not_the_padding():
    """In a batch padded to its largest image, a crop reaching a smaller image's last row and column
    (enlarged: samples past its last pixel centre) keeps its colour there, as clamping does."""
    import torch

    from iofeed.engines.nvjpeg.crop import crop_resize_flip

    small = torch.full((3, 20, 30), 200, dtype=torch.uint8)
    large = torch.arange(3 * 60 * 70, dtype=torch.int64).remainder(256).to(torch.uint8).view(3, 60, 70)
    out = crop_resize_flip([small, large], torch.tensor([[0.0, 0.0, 30.0, 20.0], [0.0, 0.0, 70.0, 60.0]]),
                           torch.tensor([False, False]), 64)
    assert out.shape == (2, 64, 64, 3) and out.dtype == torch.uint8
    assert int(out[0].min()) == 200 == int(out[0].max())


def test_flips_mirror_the_same_crop():
    import torch

    from iofeed.engines.nvjpeg.crop import crop_resize_flip

    ramp = torch.arange(40, dtype=torch.uint8).mul(6).expand(3, 30, 40).contiguous()
    boxes = torch.tensor([[5.0, 3.0, 35.0, 27.0]] * 2)
    plain, mirrored = crop_resize_flip([ramp, ramp], boxes, torch.tensor([False, True]), 16)
    assert torch.equal(mirrored, plain.flip(1)) and not torch.equal(mirrored, plain)


@pytest.mark.torchcodec
def test_torchcodec_decodes_where_installed_with_torchvisions_pixels():
    """torchcodec's batched decoder is taken first (torchvision's is deprecated in its favour); on the
    CPU both are libjpeg-turbo: the same pixels."""
    from iofeed.engines.nvjpeg.decoders import batch_decoder

    name, decode = batch_decoder()
    _, torchvision = batch_decoder(("torchvision",))
    data = [_jpeg_tensor(jpeg_bytes(smooth_rgb(64, 48, seed))) for seed in (5, 6)]
    assert name == "torchcodec"
    assert all(np.array_equal(a.numpy(), b.numpy()) for a, b in zip(decode(data, "cpu"), torchvision(data, "cpu")))
