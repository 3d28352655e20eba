"""`LoaderOptions` and the registries: every bad argument is a one-line error before any work,
frameworks are imported only when chosen, and `engine="auto"` decides from capabilities."""
from __future__ import annotations

import functools
import re
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import iofeed
from helpers.runs import slot_memory
from iofeed.adapters.numpy import to_numpy
from iofeed.engines import select
from iofeed.errors import MissingDependencyError, OptionError
from iofeed.options.adapter_choices import ADAPTERS, AdapterCaps
from iofeed.options.engine_choices import ENGINES
from iofeed.options.loader_options import LoaderOptions
from iofeed.prepare.run import ImagePolicy, preprocess
from iofeed.runtime.gpu import nvml as gpu_nvml
from iofeed.runtime.registry import Entry
from iofeed.sources.samples import open_source


def made(kind, **fields):
    """An option object made inside the test (its own check raises there, not at collection)."""
    return functools.partial(kind, **fields)


BAD = [
    ({"batch_size": 2.5}, "batch_size"), ({"batch_size": True}, "batch_size"), ({"batch_size": "4"}, "batch_size"),
    ({"batch_size": 0}, "batch_size"), ({"image_size": 64.0}, "image_size"), ({"image_size": 7}, "image_size"),
    ({"workers": 1.5}, "workers"), ({"workers": 0}, "workers"), ({"workers": True}, "workers"),
    ({"resources": made(iofeed.Resources, prefetch=2.0)}, "prefetch"),
    ({"resources": made(iofeed.Resources, prefetch=0)}, "prefetch"), ({"seed": -1}, "seed"), ({"seed": 0.5}, "seed"),
    ({"resources": made(iofeed.Resources, memory_budget=1e9)}, "memory_budget"),
    ({"resources": made(iofeed.Resources, memory_budget=0)}, "memory_budget"),
    ({"placement": made(iofeed.Placement, rank=0)}, "world_size"),
    ({"placement": made(iofeed.Placement, world_size=2)}, "rank"),
    ({"placement": made(iofeed.Placement, rank=2, world_size=2)}, "rank=2"),
    ({"placement": made(iofeed.Placement, rank=-1, world_size=2)}, "rank"),
    ({"placement": made(iofeed.Placement, world_size=0, rank=0)}, "world_size"),
    ({"augment": "yes"}, "augment"), ({"drop_last": 1}, "drop_last"), ({"gpu_augment": None}, "gpu_augment"),
    ({"split": ""}, "split"), ({"framework": "mxnet"}, "framework"), ({"framework": ["numpy"]}, "framework"),
    ({"engine": "gpu"}, "engine"), ({"skips": made(iofeed.Skips, on_error="ignore")}, "on_error"),
    ({"output": made(iofeed.Output, dtype="float16")}, "dtype"),
    ({"gpu_augment": True}, "gpu_augment"), ({"gpu_augment": True, "framework": "torch", "engine": "dali"}, "engine"),
    ({"framework": "torch", "output": made(iofeed.Output, dtype="banana")},
     "dtype='banana' is not a floating-point torch dtype"),
]


@pytest.mark.parametrize("options, named", BAD, ids=lambda v: repr(v) if isinstance(v, dict) else None)
def test_bad_arguments_are_one_line_errors_before_any_work(colour_dataset, options, named):
    before = slot_memory()
    with pytest.raises(OptionError) as info:
        given = {name: value() if isinstance(value, functools.partial) else value for name, value in options.items()}
        iofeed.loader(colour_dataset, **{"batch_size": 4, **given})
    message = str(info.value)
    assert named in message and "\n" not in message
    assert slot_memory() == before, "nothing made before the error"


def test_a_float_image_size_is_refused_before_shared_memory_is_made(tmp_path):
    """It used to build the slots, fail inside them and leave a /dev/shm entry behind."""
    before = slot_memory()
    with pytest.raises(OptionError, match=r"image_size must be an int, got 224\.0 \(float\)"):
        iofeed.loader(tmp_path / "not-even-opened", batch_size=4, image_size=224.0)
    assert slot_memory() == before


def test_numpy_integers_are_integers(colour_dataset):
    with iofeed.loader(colour_dataset, batch_size=np.int64(4), image_size=np.int32(32), workers=np.uint8(1),
                       seed=np.int16(3)) as ld:
        images, labels = next(iter(ld))
        assert images.shape == (4, 32, 32, 3) and len(labels) == 4
        assert type(ld.stats.settings["batch_size"]) is int and type(ld.options.seed) is int


def test_a_batch_larger_than_the_split_with_drop_last_says_so(colour_dataset):
    with pytest.raises(OptionError) as info:
        iofeed.loader(colour_dataset, batch_size=33, workers=1)  # the train split holds 32 samples
    message = str(info.value)
    assert "batch_size=33" in message and "32 samples" in message and "drop_last=False" in message
    with pytest.raises(OptionError, match="16 samples of split 'train' on this rank"):
        iofeed.loader(colour_dataset, batch_size=17, placement=iofeed.Placement(rank=1, world_size=2), workers=1)
    with iofeed.loader(colour_dataset, batch_size=33, workers=1, drop_last=False, image_size=32) as ld:
        assert [len(labels) for _, labels in ld] == [32]


def test_rank_and_world_size_together_shard_the_epoch(colour_dataset):
    with iofeed.loader(colour_dataset, batch_size=4, placement=iofeed.Placement(rank=1, world_size=2), workers=1,
                       image_size=32) as ld:
        assert len(ld) == 4 and ld.stats.settings["rank"] == 1 and ld.stats.settings["world_size"] == 2


def test_frameworks_are_imported_only_when_chosen(colour_dataset):
    script = textwrap.dedent("""
        import sys, iofeed
        with iofeed.loader(sys.argv[1], batch_size=4, image_size=32, workers=1) as ld:
            next(iter(ld))
        print(sorted(m for m in ("torch", "tensorflow", "nvidia.dali") if m in sys.modules))
    """)
    out = subprocess.run([sys.executable, "-c", script, str(colour_dataset)], capture_output=True, text=True,
                         timeout=120, check=True).stdout
    assert out.strip().splitlines()[-1] == "[]"


@pytest.mark.parametrize("framework, module, extra", [("torch", "torch", "torch"), ("tf", "tensorflow", "tf")])
def test_a_missing_framework_is_a_one_line_error(colour_dataset, monkeypatch, framework, module, extra):
    adapter_module = ADAPTERS[framework].target.split(":")[0]
    monkeypatch.delitem(sys.modules, adapter_module, raising=False)
    monkeypatch.setitem(sys.modules, module, None)  # makes `import <module>` fail
    with pytest.raises(MissingDependencyError) as info:
        iofeed.loader(colour_dataset, batch_size=4, framework=framework)
    assert f"pip install 'iofeed[{extra}]'" in str(info.value) and "\n" not in str(info.value)


class ListAdapter:
    """A framework made of Python lists: an adapter is one class and one registry line."""

    @classmethod
    def from_options(cls, options: LoaderOptions) -> ListAdapter:
        return cls()

    def __call__(self, batch):
        images, labels = to_numpy(batch)
        return images.tolist(), labels.tolist()

    def wrap(self, loader):
        return loader


def test_an_adapter_is_one_registry_line(colour_dataset, monkeypatch):
    entries = {**dict(ADAPTERS), "lists": Entry(f"{__name__}:ListAdapter", AdapterCaps(host=True, packs=False,
                                                                                      dtype=False))}
    monkeypatch.setattr(ADAPTERS, "_entries", entries)
    with iofeed.loader(colour_dataset, batch_size=4, image_size=8, workers=1, framework="lists") as ld:
        images, labels = next(iter(ld))
    assert isinstance(images, list) and len(images) == 4 and len(images[0]) == 8 and isinstance(labels[0], int)


@pytest.fixture(scope="module")
def raw_source(colour_tree, tmp_path_factory):
    out = tmp_path_factory.mktemp("raw") / "raw.iof"
    preprocess(colour_tree, out, policy=ImagePolicy(format="raw"), val_per_class=2, progress=False, workers=1)
    return open_source(out)


def test_auto_decides_from_capabilities(colour_dataset, raw_source, monkeypatch):
    jpeg, dali = open_source(colour_dataset), ENGINES.caps("dali")
    monkeypatch.setattr(select, "gpu_present", lambda: True)
    monkeypatch.setattr(select, "_installed", lambda module: True)
    monkeypatch.setattr(gpu_nvml, "visible_gpu_count", lambda: 2)  # LoaderOptions resolves device= against it
    assert select.fits(dali, LoaderOptions(4, placement=iofeed.Placement(device="cuda")), jpeg)
    assert select.fits(dali, LoaderOptions(4, placement=iofeed.Placement(device="cuda:1"), framework="torch"), jpeg)
    assert not select.fits(dali, LoaderOptions(4), jpeg)
    assert not select.fits(dali, LoaderOptions(4, placement=iofeed.Placement(device="cpu")), jpeg)
    assert not select.fits(dali, LoaderOptions(4, placement=iofeed.Placement(device="cuda")),
                           raw_source), "DALI reads no raw pixels"
    gpu_augment = LoaderOptions(4, placement=iofeed.Placement(device="cuda"), framework="torch", gpu_augment=True)
    assert not select.fits(dali, gpu_augment, jpeg) and select.engine_name(gpu_augment, jpeg) == "workers"
    assert select.engine_name(LoaderOptions(4, placement=iofeed.Placement(device="cuda")),
                              jpeg) == "nvjpeg"  # dali fits, but auto never takes it
    assert select.engine_name(LoaderOptions(4, placement=iofeed.Placement(device="cuda")),
                              raw_source) == "workers", "nvjpeg reads no raw pixels"
    monkeypatch.setattr(select, "gpu_present", lambda: False)
    assert not select.fits(dali, LoaderOptions(4, placement=iofeed.Placement(device="cuda")), jpeg)
    assert select.engine_name(LoaderOptions(4, placement=iofeed.Placement(device="cuda")), jpeg) == "workers"


def test_auto_without_dali_installed(colour_dataset, monkeypatch):
    monkeypatch.setattr(select, "gpu_present", lambda: True)
    monkeypatch.setattr(gpu_nvml, "visible_gpu_count", lambda: 1)
    monkeypatch.setitem(sys.modules, "nvidia.dali", None)
    assert not select.fits(ENGINES.caps("dali"), LoaderOptions(4, placement=iofeed.Placement(device="cuda")),
                           open_source(colour_dataset))


def test_auto_without_gpu_picks_workers(colour_dataset, monkeypatch):
    monkeypatch.setattr(select, "gpu_present", lambda: False)
    for device in (None, "cpu"):  # "cuda" without a GPU is refused (test_devices.py)
        with iofeed.loader(colour_dataset, batch_size=4, engine="auto", workers=1,
                           placement=iofeed.Placement(device=device)) as ld:
            assert ld.stats.settings["engine"] == "workers"


def test_a_named_engine_that_cannot_read_raw_pixels_says_so(raw_source):
    with pytest.raises(OptionError, match="raw pixels: use engine='workers'"):
        select.engine_name(LoaderOptions(4, engine="dali"), raw_source)


@pytest.mark.torch
def test_a_torch_dtype_that_is_not_floating_point_is_refused(colour_dataset):
    """Normalised images in an integer dtype are garbage; "banana" used to fail at the first batch."""
    import torch

    with pytest.raises(OptionError, match=r"dtype=torch.int64 is not a floating-point torch dtype"):
        iofeed.loader(colour_dataset, batch_size=4, framework="torch", output=iofeed.Output(dtype=torch.int64))
    with iofeed.loader(colour_dataset, batch_size=4, image_size=32, framework="torch",
                       output=iofeed.Output(dtype=torch.bfloat16),
                       workers=1) as ld:
        assert next(iter(ld))[0].dtype == torch.bfloat16
@pytest.mark.parametrize("env, says", [
    ({"RANK": "x", "WORLD_SIZE": "2"}, "environment variable RANK='x' is not an integer >= 0"),
    ({"RANK": "0", "WORLD_SIZE": "abc"}, "environment variable WORLD_SIZE='abc' is not an integer >= 1"),
    ({"RANK": "-1", "WORLD_SIZE": "2"}, "RANK='-1'"),
    ({"RANK": "0", "WORLD_SIZE": "0"}, "WORLD_SIZE='0'"),
    ({"RANK": "3", "WORLD_SIZE": "2"}, "RANK=3 is outside 0..1"),
    ({"RANK": "1"}, "RANK='1' is set without WORLD_SIZE"),
])
def test_bad_rank_variables_are_one_line_errors_naming_them(colour_dataset, monkeypatch, env, says):
    """Issue 22.15: a raw ValueError from int() named neither the variable nor the fix; issue 29: RANK
    alone was taken as (0, 1), so every process read the whole split."""
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    with pytest.raises(OptionError, match=re.escape(says)):
        iofeed.loader(colour_dataset, batch_size=4, workers=1)
