"""The DALI engine beyond the shared contract: validation, failures, selection, GPU hand-over."""
from __future__ import annotations

import io
import sys

import numpy as np
import pytest
from PIL import Image

import iofeed
from helpers.images import exif_rotated_jpeg, jpeg_bytes, make_colour_tree, png_bytes, smooth_rgb
from iofeed.engines.dali import engine as dali_engine
from iofeed.engines.dali import inputs as dali_inputs
from iofeed.engines.dali import validate as dali_validate
from iofeed.errors import MissingDependencyError, SampleError
from iofeed.runtime.gpu.streams import cuda_device_id

pytestmark = pytest.mark.dali
pytest.importorskip("nvidia.dali")




def _images_by_index(ld) -> dict[int, np.ndarray]:
    """{sample index: image as float array} over one epoch."""
    out = {}
    for images, _ in ld:
        for index, image in zip(ld.last_indices.tolist(), np.asarray(images)):
            out[index] = image.astype(np.float64)
    return out


def _coarse_difference(a: np.ndarray, b: np.ndarray) -> float:
    """Mean difference of 8x8-pixel block means: the same box and flip give a few levels at most,
    whatever the resampling kernel; another box or a missed flip gives tens."""
    side = a.shape[0] // 8
    blocks = [x[: side * 8, : side * 8].reshape(side, 8, side, 8, 3).mean(axis=(1, 3)) for x in (a, b)]
    return float(np.abs(blocks[0] - blocks[1]).mean())


@pytest.mark.parametrize("train", [True, False])
def test_same_crops_as_workers(image_tree, train):
    """Same boxes and flips as the workers engine: only the resampling differs (by a few levels)."""
    root, _ = image_tree
    runs = {}
    for engine in ("workers", "dali"):
        with iofeed.loader(root, batch_size=5, engine=engine, workers=2, augment=train, seed=4) as ld:
            runs[engine] = _images_by_index(ld)
    assert runs["dali"].keys() == runs["workers"].keys()
    for index, image in runs["dali"].items():
        assert _coarse_difference(image, runs["workers"][index]) < 2.0, index


def test_quirky_inputs_match_workers(quirky_tree):
    """Alpha, palette, 16-bit, CMYK, EXIF rotation, odd names: the same pixels as the workers engine."""
    src, valid, _ = quirky_tree
    runs = {}
    for engine in ("workers", "dali"):
        with iofeed.loader(src, batch_size=4, engine=engine, workers=1, augment=False, split="val",
                           skips=iofeed.Skips(max_skipped=None)) as ld:
            runs[engine] = (_images_by_index(ld), dict(ld.stats.skipped))
    assert runs["dali"][1] == runs["workers"][1]
    assert len(runs["dali"][0]) == len(valid)
    for index, image in runs["dali"][0].items():
        assert _coarse_difference(image, runs["workers"][0][index]) < 2.0, index


@pytest.mark.parametrize("inline", [True, False])
def test_corrupt_folder_files_are_found_at_index_time(tmp_path, monkeypatch, inline):
    if not inline:
        monkeypatch.setattr(dali_validate, "INLINE_CHECK_FILES", 0)  # validate in a process pool
    root = make_colour_tree(tmp_path / "t", per_class=3, corrupt=2)
    with iofeed.loader(root, batch_size=4, engine="dali", workers=2, drop_last=False,
                       skips=iofeed.Skips(max_skipped=0.2)) as ld:
        settings = ld.stats.settings
        assert settings["validated_files"] == 14 and settings["invalid_files"] == 2
        delivered = sum(len(labels) for _, labels in ld)
        assert delivered == 14, "spares took the skipped samples' places"
        assert ld.stats.skipped["corrupt or truncated image"] == ld.stats.refilled == 2
        assert all("bad" in example for example in ld.stats.skipped_examples)


@pytest.mark.parametrize("on_error", ["skip", "raise"])
def test_a_file_dali_cannot_decode_mid_epoch(tmp_path, monkeypatch, on_error):
    """Validation bypassed: DALI stops on the file; the engine names it, then skips it or raises.
    The pipeline is reset and fed again from that batch, not rebuilt (seconds per bad file on a
    GPU) and not freed through a private method."""
    builds = []
    build = dali_engine.DaliEngine._build
    monkeypatch.setattr(dali_engine.DaliEngine, "_build", lambda engine: (builds.append(1), build(engine))[1])
    monkeypatch.setattr(dali_engine, "validate_folder", lambda source, workers: {})
    root = make_colour_tree(tmp_path / "t", per_class=3, corrupt=1)
    with iofeed.loader(root, batch_size=4, engine="dali", workers=2,
                       skips=iofeed.Skips(on_error=on_error, max_skipped=0.1), drop_last=False) as ld:
        if on_error == "raise":
            with pytest.raises(SampleError, match="bad0.jpg"):
                list(ld)
            return
        first = [(ld.last_indices.copy(), np.array(images)) for images, _ in ld]
        assert sum(len(i) for i, _ in first) == 13, "a spare took the skipped sample's place"
        assert ld.stats.skipped["corrupt or truncated image"] == ld.stats.refilled == 1
        assert "bad0.jpg" in ld.stats.skipped_examples[0]
        assert ld.engine.restarts == 1 and len(builds) == 1, "reset and fed again, one pipeline all along"
        ld.set_epoch(0)
        again = [(ld.last_indices.copy(), np.array(images)) for images, _ in ld]  # now known bad: no restart
        assert ld.engine.restarts == 1 and len(builds) == 1
    for (i1, x1), (i2, x2) in zip(first, again, strict=True):
        assert np.array_equal(i1, i2) and np.array_equal(x1, x2)


def test_abandoned_epoch_then_next_one(colour_dataset):
    with iofeed.loader(colour_dataset, batch_size=4, engine="dali", workers=2, seed=9) as ld:
        ld.set_epoch(1)
        expected = [(ld.last_indices.copy(), np.array(images)) for images, _ in ld]
        ld.set_epoch(1)
        for k, _ in enumerate(ld):
            if k == 1:
                break
        ld.set_epoch(1)
        got = [(ld.last_indices.copy(), np.array(images)) for images, _ in ld]
        ld.close()
        ld.close()
    assert len(expected) == 8  # 32 training samples in batches of 4
    for (i1, x1), (i2, x2) in zip(expected, got, strict=True):
        assert np.array_equal(i1, i2) and np.array_equal(x1, x2)


def test_settings_and_dataset_sources_are_not_revalidated(colour_dataset):
    with iofeed.loader(colour_dataset, batch_size=4, engine="dali", workers=2,
                       resources=iofeed.Resources(prefetch=3)) as ld:
        settings = ld.stats.settings
    assert settings["engine"] == "dali" and settings["device"] == "cpu" and settings["decoder"] == "cpu"
    assert settings["num_threads"] == 2 and settings["prefetch_batches"] == 3
    assert settings["hw_decoder_load"] is None and settings["validated_files"] == 0


@pytest.mark.torch
def test_torch_adapter_on_cpu(colour_dataset):
    import torch
    with iofeed.loader(colour_dataset, batch_size=4, engine="dali", workers=1, seed=2) as raw:
        uint8 = np.array(next(iter(raw))[0])
    with iofeed.loader(colour_dataset, batch_size=4, engine="dali", workers=1, seed=2, framework="torch") as ld:
        images, labels = next(iter(ld))
    assert images.shape == (4, 3, 224, 224) and images.dtype == torch.float32 and labels.dtype == torch.int64
    mean = torch.tensor([0.485, 0.456, 0.406]).view(1, 3, 1, 1)
    std = torch.tensor([0.229, 0.224, 0.225]).view(1, 3, 1, 1)
    expected = (torch.from_numpy(uint8).permute(0, 3, 1, 2).float() / 255 - mean) / std
    assert torch.allclose(images, expected, atol=1e-4)


def test_missing_dali_is_a_one_line_error(colour_dataset, monkeypatch):
    monkeypatch.setitem(sys.modules, "nvidia.dali", None)  # makes `import nvidia.dali` fail
    with pytest.raises(MissingDependencyError, match=r"pip install 'iofeed\[dali\]'") as info:
        iofeed.loader(colour_dataset, batch_size=4, engine="dali")
    assert "\n" not in str(info.value)


def test_an_older_dali_is_refused_in_one_line_naming_its_version(colour_dataset, monkeypatch):
    """DALI before 1.44 has no `exec_dynamic=` and returns outputs unbound to the consumer's stream."""
    import nvidia.dali

    monkeypatch.setattr(nvidia.dali, "__version__", "1.43.0")
    with pytest.raises(MissingDependencyError, match=r"^NVIDIA DALI 1\.43\.0 is installed; engine='dali' needs "
                                                     r"DALI >= 1\.44 .*pip install -U 'iofeed\[dali\]'") as info:
        iofeed.loader(colour_dataset, batch_size=4, engine="dali")
    assert "\n" not in str(info.value)


def test_the_pipeline_asks_for_the_dynamic_executor_that_binds_outputs_to_a_stream(colour_dataset, monkeypatch):
    """`pipe.run(stream)` binds outputs to the stream only with the dynamic executor, which DALI 1.44-1.x
    does not take by default: the engine must ask for it (DALI 2 would hide its absence)."""
    import nvidia.dali

    asked = []

    class Recording(nvidia.dali.Pipeline):
        def __init__(self, *args, **kwargs):
            asked.append(kwargs.get("exec_dynamic"))
            super().__init__(*args, **kwargs)

    monkeypatch.setattr(nvidia.dali, "Pipeline", Recording)
    with iofeed.loader(colour_dataset, batch_size=4, image_size=32, engine="dali", workers=1) as ld:
        images, labels = next(iter(ld))
        assert images.shape == (4, 32, 32, 3)
    assert asked == [True]


def test_device_ids():
    assert cuda_device_id("cpu") is None and cuda_device_id("cuda:3") == 3


def test_jpeg_header_agrees_with_pillow():
    plain = [jpeg_bytes(smooth_rgb(131, 77, 1)), jpeg_bytes(smooth_rgb(64, 200, 2).convert("L")),
             jpeg_bytes(smooth_rgb(90, 91, 3), progressive=True)]
    for data in plain:
        assert dali_inputs.jpeg_header(data) == Image.open(io.BytesIO(data)).size
    others = [jpeg_bytes(smooth_rgb(50, 40, 4).convert("CMYK")), exif_rotated_jpeg(smooth_rgb(60, 30, 5), 6),
              png_bytes(smooth_rgb(20, 20, 6)), b"\xff\xd8\xff", b""]
    for data in others:
        assert dali_inputs.jpeg_header(data) is None


@pytest.mark.torch
@pytest.mark.gpu
def test_mixed_decode_on_gpu_matches_cpu(colour_dataset):
    """device="cuda" with a device-side adapter (torch): decoded by nvJPEG on the GPU, handed over
    by DLPack, close to the CPU decode."""
    import torch
    with iofeed.loader(colour_dataset, batch_size=4, engine="dali", workers=2, seed=3) as cpu:
        expected = np.array(next(iter(cpu))[0])
    with iofeed.loader(colour_dataset, batch_size=4, engine="dali", workers=2, seed=3,
                       placement=iofeed.Placement(device="cuda:0"),
                       framework="torch") as ld:
        assert ld.stats.settings["decoder"] == "mixed" and ld.stats.settings["device"] == "cuda:0"
        batch = next(ld.engine.run(0, ld.order.batches(0), 0, 0))
        images = torch.from_dlpack(batch.images)
        assert images.is_cuda and images.dtype == torch.uint8 and tuple(images.shape) == (4, 224, 224, 3)
        assert (images.cpu().numpy().astype(int) - expected).__abs__().mean() < 3.0


@pytest.mark.torch
@pytest.mark.gpu
def test_torch_on_cuda_gets_gpu_tensors(colour_dataset):
    import torch
    with iofeed.loader(colour_dataset, batch_size=4, engine="dali", workers=2, framework="torch",
                       placement=iofeed.Placement(device="cuda")) as ld:
        for images, labels in ld:
            assert images.is_cuda and images.dtype == torch.float32 and images.shape[1:] == (3, 224, 224)
            assert labels.is_cuda and labels.dtype == torch.int64
        assert ld.stats.images == len(ld.source) - len(ld.source) % 4


@pytest.mark.torch
@pytest.mark.gpu
def test_dali_batches_stay_exact_while_the_consumer_stream_lags(colour_dataset):
    """DALI's outputs are bound to PyTorch's stream: with ~30 ms of work queued on it before each
    batch is normalised (DALI prefetching further batches meanwhile), every batch still equals
    the one a consumer that waits for each batch gets."""
    import torch

    def run(lagging: bool) -> list:
        kept = []
        with iofeed.loader(colour_dataset, batch_size=4, engine="dali", workers=2, framework="torch",
                           placement=iofeed.Placement(device="cuda"), seed=5) as ld:
            for images, _ in ld:
                kept.append(images.clone())
                if lagging:
                    torch.cuda._sleep(50_000_000)  # queued before the next batch's normalisation
                else:
                    torch.cuda.synchronize()
        torch.cuda.synchronize()
        return kept

    reference, lagging = run(False), run(True)
    assert len(reference) == len(lagging) > 2
    assert all(torch.equal(a, b) for a, b in zip(reference, lagging))


@pytest.mark.gpu
def test_numpy_framework_on_cuda_gets_host_arrays(colour_dataset):
    with iofeed.loader(colour_dataset, batch_size=4, engine="dali", workers=2,
                       placement=iofeed.Placement(device="cuda")) as ld:
        images, labels = next(iter(ld))
        assert ld.stats.settings["decoder"] == "mixed"
        assert isinstance(images, np.ndarray) and images.shape == (4, 224, 224, 3) and images.dtype == np.uint8


@pytest.mark.gpu
def test_auto_with_gpu_never_takes_dali_and_says_why(colour_dataset):
    with iofeed.loader(colour_dataset, batch_size=4, engine="auto", placement=iofeed.Placement(device="cuda")) as ld:
        assert ld.stats.settings["engine"] == "nvjpeg"
        (note,) = [d for d in ld.stats.settings["decisions"] if "chose 'nvjpeg'" in d]
        assert "engine='workers'" in note
