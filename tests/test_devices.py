"""One concrete device per loader, and NVML's numbering mapped to CUDA's (fakes for NVML: no GPU here)."""
from __future__ import annotations

import sys
import time

import pytest

import iofeed
from helpers.nvml import FakeGpu, fake_pynvml, four_gpus
from iofeed.errors import IofeedError, OptionError
from iofeed.runtime.gpu import nvml as gpu_nvml
from iofeed.runtime.gpu.device import resolve_device


def resolve(device, current=None, env=None, count=1):
    return resolve_device(device, current=current, env=env or {}, device_count=lambda: count)


def test_an_explicit_index_wins():
    for device in ("cuda:3", 3):
        assert resolve(device, current=1, env={"LOCAL_RANK": "2"}, count=4) == "cuda:3"


def test_cuda_is_the_current_device_once_cuda_is_initialised():
    assert resolve("cuda", current=1, env={"LOCAL_RANK": "2"}, count=4) == "cuda:1"


def test_cuda_before_set_device_under_torchrun_is_the_local_rank():
    assert resolve("cuda", env={"LOCAL_RANK": "2"}, count=4) == "cuda:2"
    assert resolve("cuda") == "cuda:0"


def test_a_local_rank_without_its_gpu_is_a_clear_error():
    with pytest.raises(OptionError, match="LOCAL_RANK=1.*1 GPU.*set_device"):
        resolve("cuda", env={"LOCAL_RANK": "1"}, count=1)
    with pytest.raises(OptionError, match="LOCAL_RANK='x'"):
        resolve("cuda", env={"LOCAL_RANK": "x"})


def test_cpu_stays_cpu_and_bad_devices_are_refused():
    assert resolve(None, current=1) == "cpu" and resolve("cpu", env={"LOCAL_RANK": "3"}) == "cpu"
    for bad in ("tpu", "cuda:", "cuda:-1", "CUDA", -1, True):
        with pytest.raises(OptionError, match="device="):
            resolve(bad)


def test_torch_devices_resolve_like_their_names():
    torch = pytest.importorskip("torch")
    assert resolve(torch.device("cuda", 2)) == "cuda:2" and resolve(torch.device("cpu")) == "cpu"


def test_every_cpu_spelling_torch_accepts_is_the_cpu():
    """`accelerator.device` in a multi-process CPU run is `cpu:0`; `"cpu:0"` and
    `torch.device("cpu", 0)` were refused as "not a device iofeed can feed"."""
    torch = pytest.importorskip("torch")
    for device in ("cpu:0", "cpu:1", torch.device("cpu", 0), torch.device("cpu:0")):
        assert resolve(device, env={"LOCAL_RANK": "1"}) == "cpu", device
    for bad in ("cpu:", "cpu:x", "cpu0"):
        with pytest.raises(OptionError, match="device="):
            resolve(bad)


@pytest.mark.torch
def test_the_torch_loader_feeds_cpu_0(colour_dataset):
    import torch

    import iofeed

    for device in ("cpu:0", torch.device("cpu", 0)):
        with iofeed.loader(colour_dataset, batch_size=4, image_size=32, framework="torch",
                           placement=iofeed.Placement(device=device),
                           workers=1) as ld:
            images, labels = next(iter(ld))
            assert images.device.type == "cpu" and images.shape == (4, 3, 32, 32) and labels.shape == (4,)


def test_the_loader_resolves_cuda_under_torchrun_before_building_anything(colour_dataset, monkeypatch):
    """LOCAL_RANK=1 on a one-GPU machine: loader() refuses at once, naming the fix."""
    import iofeed

    monkeypatch.setitem(sys.modules, "pynvml", fake_pynvml([FakeGpu("GPU-aaaa")]))
    monkeypatch.setenv("LOCAL_RANK", "1")
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    with pytest.raises(OptionError, match="LOCAL_RANK=1"):
        iofeed.loader(colour_dataset, batch_size=4, image_size=32, placement=iofeed.Placement(device="cuda"), workers=1)
    with iofeed.loader(colour_dataset, batch_size=4, image_size=32, placement=iofeed.Placement(device="cpu"),
                       workers=1) as ld:
        assert next(iter(ld))[0].shape == (4, 32, 32, 3)


def test_dali_takes_the_local_rank_gpu_when_cuda_is_not_initialised(monkeypatch):
    from iofeed.options.loader_options import LoaderOptions
    from iofeed.runtime.gpu import streams as dali
    torch = sys.modules.get("torch")
    started = torch is not None and torch.cuda.is_initialized()  # then the current device wins
    monkeypatch.setitem(sys.modules, "pynvml", four_gpus())
    monkeypatch.setenv("LOCAL_RANK", "2")
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    device = LoaderOptions(batch_size=4, placement=iofeed.Placement(device="cuda")).device
    assert dali.cuda_device_id(device) == (torch.cuda.current_device() if started else 2)
    assert dali.cuda_device_id("cuda:1") == 1 and dali.cuda_device_id("cpu") is None


def test_the_device_is_resolved_once_in_the_options_and_dali_takes_that_one(monkeypatch):
    """DALI used to resolve `device="cuda"` again when it built its pipeline: a LOCAL_RANK (or current
    device) that changed in between put its decoding on another GPU than the adapter's copies."""
    from iofeed.options.loader_options import LoaderOptions
    from iofeed.runtime.gpu import streams as dali

    torch = sys.modules.get("torch")
    started = torch is not None and torch.cuda.is_initialized()  # then the current device wins
    monkeypatch.setitem(sys.modules, "pynvml", four_gpus())
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    monkeypatch.setenv("LOCAL_RANK", "1")
    options = LoaderOptions(batch_size=4, placement=iofeed.Placement(device="cuda"))
    monkeypatch.setenv("LOCAL_RANK", "3")
    want = torch.cuda.current_device() if started else 1
    assert options.device == f"cuda:{want}" and dali.cuda_device_id(options.device) == want


# ---------------------------------------------------------------- NVML's numbering


@pytest.mark.parametrize("value, entries", [
    (None, None), ("", []), ("2,0", ["2", "0"]), ("1,-1,2", ["1"]), ("GPU-3333,1", ["GPU-3333", "1"]),
    ("0,bogus,1", ["0"]), ("MIG-abcd", ["MIG-abcd"]),
])
def test_cuda_visible_devices_is_read_as_cuda_reads_it(value, entries):
    assert gpu_nvml.cuda_visible_devices(value) == entries


@pytest.mark.parametrize("visible, nvml", [
    ("3", 3), ("2,3", 2), ("GPU-3333aaaa", 3), ("GPU-2222aaaa-0000-0000-0000-000000000002,0", 2), (None, 0),
])
def test_cuda_device_0_is_the_gpu_cuda_visible_devices_names(visible, nvml):
    env = {} if visible is None else {"CUDA_VISIBLE_DEVICES": visible}
    assert gpu_nvml.cuda_nvml_handle(four_gpus(), 0, env) == nvml


def test_the_uuid_from_cuda_beats_the_environment():
    uuid = "3333aaaa-0000-0000-0000-000000000003"  # PyTorch writes it without "GPU-"
    assert gpu_nvml.cuda_nvml_handle(four_gpus(), 0, {"CUDA_VISIBLE_DEVICES": "0"}, uuid=uuid) == 3
    assert gpu_nvml.cuda_nvml_handle(four_gpus(), 0, {}, uuid="ffffffff-0000") is None


def test_hidden_gpus_are_not_visible():
    nvml = four_gpus()
    for hidden in ("", "-1", "7", "GPU-nope"):
        assert gpu_nvml.cuda_nvml_handle(nvml, 0, {"CUDA_VISIBLE_DEVICES": hidden}) is None
    assert gpu_nvml.cuda_nvml_handle(nvml, 1, {"CUDA_VISIBLE_DEVICES": "2"}) is None
    assert gpu_nvml.visible_nvml_handles(nvml, ["1", "5", "2"]) == [1]  # CUDA stops at an index it lacks


def test_a_mig_instance_is_found_by_its_uuid():
    nvml = fake_pynvml([FakeGpu("GPU-aaaa"), FakeGpu("GPU-bbbb")], migs={"MIG-1234": 1})
    assert gpu_nvml.cuda_nvml_handle(nvml, 0, {"CUDA_VISIBLE_DEVICES": "MIG-1234"}) == 1


def test_auto_does_not_pick_dali_when_every_gpu_is_hidden(monkeypatch):
    from iofeed.engines import select
    from iofeed.options.engine_choices import ENGINES
    from iofeed.options.loader_options import LoaderOptions

    class JpegSource:
        def has_raw(self) -> bool:
            return False

    monkeypatch.setitem(sys.modules, "pynvml", four_gpus())
    monkeypatch.setattr(select, "_installed", lambda module: True)  # "DALI is installed"
    options = LoaderOptions(batch_size=4, placement=iofeed.Placement(device="cuda:0"))
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    assert gpu_nvml.visible_gpu_count() == 0 and not gpu_nvml.gpu_present()
    assert not select.fits(ENGINES.caps("dali"), options, JpegSource())
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "2,3")
    assert gpu_nvml.visible_gpu_count() == 2 and select.fits(ENGINES.caps("dali"), options, JpegSource())


def test_auto_never_takes_dali_with_a_gpu_and_records_why(monkeypatch):
    """It used to take DALI whenever a GPU was present: DALI fed ResNet-50 at 94% of the ceiling where the
    workers engine reached 98-99% (H100, 16 cores). With torchvision there, the nvjpeg engine is taken
    (its workers only pack bytes); without it the workers engine, saying why not DALI."""
    from iofeed.engines import select
    from iofeed.options.loader_options import LoaderOptions

    class JpegSource:
        def has_raw(self) -> bool:
            return False

    monkeypatch.setitem(sys.modules, "pynvml", four_gpus())
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    monkeypatch.setattr(select, "_installed", lambda module: True)  # "DALI and torchvision are installed"
    options = LoaderOptions(batch_size=4, placement=iofeed.Placement(device="cuda:0"))
    assert select.engine_name(options, JpegSource()) == "nvjpeg"
    (note,) = select.choice_notes(options, "nvjpeg", JpegSource())
    assert note.startswith("engine='auto' chose 'nvjpeg': a CUDA device") and "engine='workers'" in note
    monkeypatch.setattr(select, "_installed", lambda module: module != "torchvision")
    assert select.engine_name(options, JpegSource()) == "workers"
    (note,) = select.choice_notes(options, "workers", JpegSource())
    assert note.startswith("engine='auto' chose 'workers' over 'dali': ") and "94%" in note
    assert select.choice_notes(LoaderOptions(batch_size=4, placement=iofeed.Placement(device="cpu")), "workers",
                               JpegSource()) == []
    assert select.engine_name(LoaderOptions(batch_size=4, placement=iofeed.Placement(device="cuda:0"), engine="dali"),
                              JpegSource()) == "dali"


def test_gpu_info_describes_the_visible_gpu(monkeypatch):
    nvml = fake_pynvml([FakeGpu("GPU-aaaa", name="A100"), FakeGpu("GPU-bbbb", name="H100", total=80 << 30)])
    monkeypatch.setitem(sys.modules, "pynvml", nvml)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "1")
    assert gpu_nvml.gpu_info(0) == {"name": "H100", "driver": "580.65", "memory_bytes": 80 << 30}
    assert gpu_nvml.gpu_info(1) is None


# ---------------------------------------------------------------- NVML failing after start-up


def test_gpu_info_keeps_what_it_read_when_nvml_fails(monkeypatch):
    monkeypatch.setitem(sys.modules, "pynvml", four_gpus(fail_after=0))
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    info = gpu_nvml.gpu_info(0)
    assert info["name"] and info["memory_bytes"] is None and info["errors"] == ["memory: GPU is lost"]


def test_bench_machine_record_notes_what_nvml_failed(monkeypatch):
    from iofeed.cli.bench.machine import describe_machine

    monkeypatch.setitem(sys.modules, "pynvml", four_gpus(fail_after=0))
    notes = []
    machine = describe_machine(True, notes)
    assert machine["gpu"]["memory_bytes"] is None and "errors" not in machine["gpu"]
    assert notes == ["NVML could not read the GPU's memory: GPU is lost"]


def test_the_bench_sampler_outlives_failing_reads(monkeypatch):
    from iofeed.cli.bench.gpu import GpuSampler

    nvml = four_gpus(fail_after=4)  # the start-up check and 3 samples succeed, then every read fails
    monkeypatch.setitem(sys.modules, "pynvml", nvml)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "2")
    sampler = GpuSampler(interval=0.005)
    try:
        deadline = time.monotonic() + 120  # a hang guard
        while nvml.reads["n"] < 12 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert sampler._thread.is_alive()
    finally:
        sampler.close()
    assert [s.util for s in sampler.samples] == [30.0] * 3  # GPU 2's utilisation, not GPU 0's
    (note,) = sampler.notes()
    assert "GPU is lost" in note and "left out" in note


def test_the_bench_sampler_refuses_a_hidden_gpu(monkeypatch):
    from iofeed.cli.bench.gpu import GpuSampler

    monkeypatch.setitem(sys.modules, "pynvml", four_gpus())
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    with pytest.raises(IofeedError, match="CUDA_VISIBLE_DEVICES"):
        GpuSampler()


def test_the_doctor_keeps_tracing_when_nvml_fails(monkeypatch):
    """Readings NVML fails are missing (NaN, null in JSON, left out of the analysis), with a note."""
    import json

    from iofeed.cli.doctor import trace as doctor_trace
    from iofeed.cli.doctor.stats import active_window

    monkeypatch.setitem(sys.modules, "pynvml", fake_pynvml([FakeGpu("GPU-aaaa", util=90)], fail_after=2 + 20))
    code = "import time; time.sleep(1.5)"
    rec = doctor_trace.record([sys.executable, "-c", code], interval=0.02)
    util = rec.trace.gpu_util[0]
    assert len(util) > 20 and (util[:10] == 90).all() and (util[-3:] != util[-3:]).all()
    assert any("GPU is lost" in note for note in rec.notes)
    window = active_window(rec.trace)
    assert window is not None and not (window.gpu_util != window.gpu_util).any()
    raw = json.loads(json.dumps(rec.trace.to_dict(), allow_nan=False))
    assert raw["gpu_util"][0][-1] is None
    assert doctor_trace.Trace.from_dict(raw).gpu_util.shape == rec.trace.gpu_util.shape


@pytest.mark.parametrize("options", [{"framework": "numpy"}, {"framework": "torch"}, {"engine": "dali"}],
                         ids=lambda o: next(iter(o.values())))
def test_cuda_without_a_visible_gpu_is_refused_at_the_loader(colour_dataset, monkeypatch, options):
    """It used to give CPU arrays silently (numpy), PyTorch's driver traceback or DALI's assert at the
    first batch; now one line at `loader()`, before any work, naming Placement(device='cpu')."""
    import iofeed
    from helpers.runs import slot_memory

    monkeypatch.setitem(sys.modules, "pynvml", fake_pynvml([]))
    monkeypatch.delenv("LOCAL_RANK", raising=False)
    before = slot_memory()
    with pytest.raises(OptionError, match=r"^Placement\.device='cuda', but no CUDA device is available here: pass "
                                          r"placement=iofeed\.Placement\(device='cpu'\)") as info:
        iofeed.loader(colour_dataset, batch_size=4, placement=iofeed.Placement(device="cuda"), **options)
    assert "\n" not in str(info.value) and slot_memory() == before


def test_a_gpu_index_beyond_the_visible_ones_is_refused(colour_dataset, monkeypatch):
    import iofeed

    monkeypatch.setitem(sys.modules, "pynvml", fake_pynvml([FakeGpu("GPU-aaaa")]))
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0")
    with pytest.raises(OptionError, match=r"device='cuda:2' is GPU 2, but 1 GPU\(s\) are visible here"):
        iofeed.loader(colour_dataset, batch_size=4, placement=iofeed.Placement(device="cuda:2"))


def test_backend_dali_without_dali_names_its_extra_at_the_loader(colour_dataset, monkeypatch):
    import iofeed
    from helpers.runs import slot_memory
    from iofeed.errors import MissingDependencyError

    monkeypatch.setitem(sys.modules, "nvidia.dali", None)
    before = slot_memory()
    with pytest.raises(MissingDependencyError, match=r"pip install 'iofeed\[dali\]'"):
        iofeed.loader(colour_dataset, batch_size=4, engine="dali")
    assert slot_memory() == before
