"""The loader where people start it from: a script without a `__main__` guard, stdin, `-c`, `-m`,
the interactive prompt, a Jupyter kernel; and batches that outlive their loader."""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from helpers.images import CLASS_COLOURS

# One statement per line, no blocks: the same text runs as a file, on stdin, at the prompt.
_EPOCH = """\
import iofeed, numpy as np
colours = np.array({colours})
ld = iofeed.loader({tree!r}, batch_size=8, image_size=32, workers=2, seed=1)
nearest = lambda image: int(np.abs(image.reshape(-1, 3).mean(0) - colours).sum(1).argmin())
pairs = [(int(label), nearest(image)) for images, labels in ld for image, label in zip(images, labels)]
print("EPOCH", len(pairs), sum(a == b for a, b in pairs), sorted(set(a for a, _ in pairs)), flush=True)
ld.close()
"""


def _script(tree: Path) -> str:
    return _EPOCH.format(colours=[list(c) for c in CLASS_COLOURS], tree=str(tree))


def _env() -> dict[str, str]:
    src = str(Path(__file__).resolve().parents[1] / "src")
    return {**os.environ, "PYTHONPATH": os.pathsep.join([src, os.environ.get("PYTHONPATH", "")])}


def _assert_full_epoch(out: subprocess.CompletedProcess) -> None:
    assert out.returncode == 0, out.stderr[-3000:]
    line = next(ln for ln in out.stdout.splitlines() if "EPOCH" in ln)
    assert line.split("EPOCH", 1)[1].split() == ["40", "40", "[0,", "1,", "2,", "3]"], line
    assert "leaked" not in out.stderr, out.stderr


@pytest.fixture
def tree(tmp_path):
    from helpers.images import make_colour_tree

    return make_colour_tree(tmp_path / "tree", per_class=10)


@pytest.mark.parametrize("how", ["file", "stdin", "dash-c", "module", "prompt"])
def test_unguarded_script_reads_a_full_epoch(tree, tmp_path, how):
    text = _script(tree)
    (tmp_path / "train.py").write_text(text)
    run = {"file": ([sys.executable, "train.py"], None),
           "stdin": ([sys.executable, "-"], text),
           "dash-c": ([sys.executable, "-c", text], None),
           "module": ([sys.executable, "-m", "train"], None),
           "prompt": ([sys.executable, "-i", "-q"], text)}[how]
    out = subprocess.run(run[0], input=run[1], cwd=tmp_path, env=_env(), capture_output=True, text=True,
                         timeout=120)
    _assert_full_epoch(out)


def test_a_child_that_reruns_the_script_gets_a_one_line_error_naming_the_guard(tree, tmp_path):
    # The user's own spawn child re-runs this unguarded script: iofeed cannot start workers there.
    (tmp_path / "mine.py").write_text(textwrap.dedent(f"""\
        import multiprocessing, os, iofeed
        ld = iofeed.loader({str(tree)!r}, batch_size=8, image_size=32, workers=1)
        next(iter(ld))
        child = multiprocessing.get_context("spawn").Process(target=os.getpid)
        child.start(); child.join()
        print("CHILD", child.exitcode, flush=True)
    """))
    out = subprocess.run([sys.executable, "mine.py"], cwd=tmp_path, env=_env(), capture_output=True, text=True,
                         timeout=120)
    assert "CHILD 1" in out.stdout, out.stderr[-3000:]
    error = next(ln for ln in out.stderr.splitlines() if ln.startswith("iofeed.errors.StartError"))
    assert 'if __name__ == "__main__":' in error
    assert "memory" not in out.stderr


@pytest.mark.slow
def test_jupyter_kernel_reads_a_full_epoch(tree):
    jupyter_client = pytest.importorskip("jupyter_client")
    pytest.importorskip("ipykernel")
    manager, client = jupyter_client.manager.start_new_kernel(kernel_name="python3", env=_env())
    try:
        lines: list[str] = []
        reply = client.execute_interactive(
            _script(tree), timeout=120,
            output_hook=lambda msg: lines.append(msg["content"].get("text", "")
                                                 or msg["content"].get("evalue", "")))
        assert reply["content"]["status"] == "ok", lines
    finally:
        client.stop_channels()
        manager.shutdown_kernel(now=True)
    text = "".join(lines)
    assert "EPOCH 40 40 [0, 1, 2, 3]" in text, text


_AFTER_CLOSE = """\
import gc, iofeed
source = {tree!r}
def first_batch():
    dl = iofeed.loader(source, batch_size=8, image_size=32, workers=1)
    return next(iter(dl))
images, labels = first_batch()
gc.collect()
ld = iofeed.loader(source, batch_size=8, image_size=32, workers=1)
closed_images, closed_labels = next(iter(ld))
ld.close()
with iofeed.loader(source, batch_size=8, image_size=32, workers=1) as ld:
    with_images, with_labels = next(iter(ld))
print("SUMS", *(int(a.sum()) > 0 for a in (images, labels, closed_images, closed_labels, with_images)))
"""


def test_numpy_batches_outlive_their_loader(tree, tmp_path):
    (tmp_path / "after.py").write_text('if __name__ == "__main__":\n' + textwrap.indent(
        _AFTER_CLOSE.format(tree=str(tree)), "    "))
    out = subprocess.run([sys.executable, "after.py"], cwd=tmp_path, env=_env(), capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, f"rc {out.returncode}: {out.stderr[-2000:]}"
    assert "SUMS True True True True True" in out.stdout


@pytest.mark.slow
@pytest.mark.torch
@pytest.mark.matplotlib
def test_the_gpu_check_dry_run_runs_every_step_here_within_six_minutes(tmp_path):
    """`bash scripts/gpu-session.sh --dry-run`: every step's CPU part at tiny sizes, so that a typo
    cannot waste the one device call; the plan fits 6 minutes (a 15-minute GPU slot has room to run
    it again) and what comes back fits the device tool's 8 files, the two model runs' PNGs among them."""
    repo = Path(__file__).resolve().parents[1]
    out = tmp_path / "out"
    env = {**_env(), "PYTHON": sys.executable, "OUT": str(out), "TMPDIR": str(tmp_path)}
    run = subprocess.run(["bash", "scripts/gpu-session.sh", "--dry-run"], cwd=repo, env=env, capture_output=True,
                         text=True, timeout=1500)
    lines = run.stdout.splitlines()
    assert run.returncode == 0, run.stdout[-4000:] + run.stderr[-2000:]
    steps = [ln.split()[1] for ln in lines if ln.startswith("=== ") and "(budget" in ln]
    assert steps == ["setup", "data", "resnet18", "resnet50", "loader", "tests", "summary"]
    assert all(f"=== {step}: rc 0 in" in run.stdout for step in steps)
    plan = next(ln for ln in lines if ln.startswith("plan:"))
    assert int(plan.rsplit("total ", 1)[1].split()[0]) <= 360, plan
    total = lines[-1].split()
    assert total[0] == "total" and total[2] == "min" and int(total[1]) <= 6, lines[-1]
    names = sorted(p.name for p in out.iterdir())
    assert names == ["dry-cpu-loader.json", "dry-cpu-resnet18.json", "dry-cpu-resnet18.png", "dry-cpu-resnet50.json",
                     "dry-cpu-resnet50.png", "dry-cpu-summary.txt", "dry-cpu-tests.log", "session.log"], names
    summary = (out / "dry-cpu-summary.txt").read_text()
    assert "  iofeed-dataset " in summary and "  iofeed-nchw " in summary, summary
    for target in ("the loader alone, GPU-decode engine", "ResNet-18, GPU-decode engine",
                   "ResNet-50, GPU-decode engine", "CPU per image, GPU-decode engine",
                   "default layout / channels_last"):
        assert target in summary, summary
    tests = (out / "dry-cpu-tests.log").read_text()
    assert "tests collected" in tests and "test_two_ranks_share_one_gpu_under_torchrun" in tests, tests[-2000:]
    from iofeed.cli.bench.feeds import CATALOGUE

    if "iofeed-nvjpeg" in CATALOGUE:  # the GPU-decode engine merged: the check measures it, dry too
        assert "  iofeed-nvjpeg " in summary, summary
    else:
        assert "note: iofeed-nvjpeg is not a bench feed in this checkout yet" in run.stdout


def test_the_gpu_check_refuses_a_real_run_without_the_gpu_decode_feed(tmp_path):
    """A real run needs the GPU-decode engine's feed (`iofeed-nvjpeg`, the engine the check is for):
    without it the script stops before any step, in one line, instead of spending the GPU slot on
    the rest. Checked with a feed name the catalogue lacks."""
    repo = Path(__file__).resolve().parents[1]
    env = {**_env(), "PYTHON": sys.executable, "OUT": str(tmp_path / "out"), "IOFEED_DATA": str(tmp_path / "data"),
           "IOFEED_GPU_FEED": "iofeed-not-a-feed"}
    run = subprocess.run(["bash", "scripts/gpu-session.sh"], cwd=repo, env=env, capture_output=True, text=True,
                         timeout=300)
    assert run.returncode == 2, run.stdout + run.stderr
    assert "iofeed-not-a-feed is not a bench feed in this checkout" in run.stderr, run.stderr
    assert "=== setup" not in run.stdout and not (tmp_path / "out").exists(), "nothing run, nothing written"
