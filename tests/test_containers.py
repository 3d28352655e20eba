"""Where training jobs run: a container's 64 MiB /dev/shm, CPU affinity and cgroup quotas, memory
limits, and several ranks per node."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

import iofeed
from helpers.images import CLASS_COLOURS, make_colour_tree
from iofeed.errors import OptionError
from iofeed.runtime.system import usable_cores, usable_memory

SRC = str(Path(__file__).resolve().parents[1] / "src")


def _env(**extra: str) -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": os.pathsep.join([SRC, os.environ.get("PYTHONPATH", "")]), **extra}


def _affinity() -> int:
    return len(os.sched_getaffinity(0))


def test_cpu_quota_and_memory_limit_from_cgroup_v2_files(tmp_path):
    (tmp_path / "cpu.max").write_text("150000 100000\n")
    (tmp_path / "memory.max").write_text(f"{1 << 30}\n")
    (tmp_path / "memory.current").write_text(f"{1 << 28}\n")
    cores = usable_cores(tmp_path, {})
    assert cores.amount == min(_affinity(), 1) and "quota 1.5" in cores.because
    memory = usable_memory(tmp_path, {})
    assert memory.amount <= (1 << 30) - (1 << 28) and "cgroup limit" in memory.because
    (tmp_path / "cpu.max").write_text("max 100000\n")
    (tmp_path / "memory.max").write_text("max\n")
    assert usable_cores(tmp_path, {}).amount == _affinity()
    assert "cgroup limit none" in usable_memory(tmp_path, {}).because


def test_cgroup_v1_files(tmp_path):
    (tmp_path / "cpu").mkdir()
    (tmp_path / "cpu" / "cpu.cfs_quota_us").write_text("100000\n")
    (tmp_path / "cpu" / "cpu.cfs_period_us").write_text("100000\n")
    (tmp_path / "memory").mkdir()
    (tmp_path / "memory" / "memory.limit_in_bytes").write_text(f"{1 << 29}\n")
    (tmp_path / "memory" / "memory.usage_in_bytes").write_text("0\n")
    assert usable_cores(tmp_path, {}).amount == 1
    assert usable_memory(tmp_path, {}).amount <= 1 << 29


def test_local_ranks_share_cores_and_memory(tmp_path, monkeypatch, colour_dataset):
    one, two = usable_cores(tmp_path, {}), usable_cores(tmp_path, {"LOCAL_WORLD_SIZE": "2"})
    assert two.amount == max(1, one.amount // 2) and "local ranks 2" in two.because
    with pytest.raises(OptionError, match="LOCAL_WORLD_SIZE='zero'"):
        usable_cores(tmp_path, {"LOCAL_WORLD_SIZE": "zero"})
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "2")
    with iofeed.loader(colour_dataset, batch_size=4, image_size=32) as ld:
        settings = ld.stats.settings
    assert settings["max_workers"] == settings["usable_cores"] == max(1, _affinity() // 2)
    assert "local ranks 2" in settings["cores_because"] and "local ranks 2" in settings["memory_because"]
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "1")
    with iofeed.loader(colour_dataset, batch_size=4, image_size=32) as ld:
        alone = ld.stats.settings["memory_budget"]
    assert settings["memory_budget"] < alone * 0.75, "two ranks: each about half the budget"


def test_taskset_to_one_core_autotunes_up_to_one_worker(colour_dataset):
    if shutil.which("taskset") is None:
        pytest.skip("taskset (util-linux) is not installed")
    script = textwrap.dedent(f"""\
        import json, iofeed
        with iofeed.loader({str(colour_dataset)!r}, batch_size=4, image_size=32) as ld:
            n = sum(len(labels) for _, labels in ld)
            s = ld.stats.settings
        print(json.dumps({{"n": n, "max_workers": s["max_workers"], "because": s["cores_because"]}}))
    """)
    out = subprocess.run(["taskset", "-c", "0", sys.executable, "-c", script], env=_env(LOCAL_WORLD_SIZE="1"),
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    found = json.loads(out.stdout.splitlines()[-1])
    assert found["max_workers"] == 1 and found["because"].startswith("affinity 1,"), found
    assert found["n"] == 32


def _can_unshare_mounts() -> bool:
    """Whether this process may make a private mount namespace and mount a tmpfs in it."""
    if shutil.which("unshare") is None:
        return False
    probe = subprocess.run(["unshare", "-m", "sh", "-c", "mount -t tmpfs -o size=1m tmpfs /mnt"],
                           capture_output=True)
    return probe.returncode == 0


_SMALL_SHM = """\
import os, shutil, iofeed, numpy as np
colours = np.array({colours}, np.float32)
assert shutil.disk_usage("/dev/shm").total == 64 << 20, shutil.disk_usage("/dev/shm")
ld = iofeed.loader({tree!r}, batch_size=256, image_size=224, framework="torch")
n = right = 0
for images, labels in ld:
    assert tuple(images.shape[1:]) == (3, 224, 224)
    means = images.mean(dim=(2, 3)).numpy() * np.array([0.229, 0.224, 0.225]) + np.array([0.485, 0.456, 0.406])
    guess = np.abs(means[:, None, :] * 255 - colours[None]).sum(2).argmin(1)
    n += len(labels); right += int((guess == labels.numpy()).sum())
print("EPOCH", n, right, len(ld), ld.stats.settings["shared_memory_bytes"] > 64 << 20, flush=True)
ld.close()
"""


@pytest.mark.slow
@pytest.mark.torch
def test_full_epoch_at_batch_256_with_a_64_mib_dev_shm(tmp_path):
    pytest.importorskip("torch")
    if not _can_unshare_mounts():
        pytest.skip("no permission for a private mount namespace (unshare -m) here")
    tree = tmp_path / "tree"
    for c, colour in enumerate(CLASS_COLOURS):
        (tree / f"{c:03d}.colour{c}").mkdir(parents=True)
        rng = np.random.default_rng(c)
        for i in range(150):
            pixels = np.clip(np.array(colour) + rng.integers(-12, 13, (64, 64, 3)), 0, 255).astype(np.uint8)
            Image.fromarray(pixels).save(tree / f"{c:03d}.colour{c}" / f"{i:04d}.jpg", quality=90)
    (tmp_path / "train.py").write_text(_SMALL_SHM.format(colours=[list(c) for c in CLASS_COLOURS], tree=str(tree)))
    command = f"mount -t tmpfs -o size=64m tmpfs /dev/shm && exec {sys.executable} {tmp_path / 'train.py'}"
    out = subprocess.run(["unshare", "-m", "sh", "-c", command], env=_env(), capture_output=True, text=True,
                         timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    line = next(ln for ln in out.stdout.splitlines() if ln.startswith("EPOCH"))
    assert line.split()[1:] == ["512", "512", "2", "True"], line  # 600 samples, drop_last: 2 full batches


def test_a_budget_too_small_names_where_it_came_from(tmp_path):
    tree = make_colour_tree(tmp_path / "t", per_class=2)
    with pytest.raises(OptionError, match=r"Resources\.memory_budget=1,000 bytes \(Resources\.memory_budget as "
                                          r"given\)"):
        iofeed.loader(tree, batch_size=4, resources=iofeed.Resources(memory_budget=1000))
