"""`iofeed doctor`: each pattern recognised on recorded traces (and the healthy one left alone),
a real recording without GPU, the data check on quirky JPEGs, the command line end to end."""
from __future__ import annotations

import dataclasses
import json
import os
import sys
from pathlib import Path

import numpy as np
import pytest

from helpers.images import jpeg_bytes, make_image_tree, smooth_rgb
from iofeed.cli.doctor.data import check_data
from iofeed.cli.doctor.environment import _findings as environment_findings
from iofeed.cli.doctor.environment import check_environment
from iofeed.cli.doctor.patterns import diagnose
from iofeed.cli.doctor.precision import mixed_precision_finding
from iofeed.cli.doctor.stats import summarize
from iofeed.cli.doctor.trace import Trace, record
from iofeed.cli.main import main
from iofeed.errors import OptionError, SourceError

GIB = 2**30
DT = 0.1  # seconds between samples, as `record` takes them by default
N = 300  # 30 s of samples


def recorded(gpu_util, gpu_mem_gib, cpu, iowait=None, total_gib=80.0, loader_cpu=None) -> Trace:
    """A trace as `record` would return it, passed through its JSON form as `--json` stores it.
    `loader_cpu`: (processes, N) % of a core of each loader process (none by default)."""
    gpu_util = np.asarray(gpu_util, dtype=np.float64).reshape(-1, N)
    gpus = gpu_util.shape[0]
    gpu_mem = np.broadcast_to(np.asarray(gpu_mem_gib, dtype=np.float64).reshape(-1, 1) * GIB, (gpus, N))
    trace = Trace(t=DT * np.arange(1, N + 1), gpu_util=gpu_util, gpu_mem=np.array(gpu_mem),
                  gpu_mem_total=np.full(gpus, total_gib * GIB), cpu=np.asarray(cpu, dtype=np.float64),
                  iowait=np.zeros(N) if iowait is None else np.asarray(iowait, dtype=np.float64),
                  rss=np.full(N, 3.0 * GIB), trainer_cpu=np.full(N, 100.0),
                  loader_cpu=np.zeros((0, N)) if loader_cpu is None else np.asarray(loader_cpu, dtype=np.float64))
    return Trace.from_dict(json.loads(json.dumps(trace.to_dict())))


def noise(low: float, high: float, seed: int, shape=(N,)) -> np.ndarray:
    return np.random.default_rng(seed).uniform(low, high, shape)


def codes(trace: Trace, command=None) -> set[str]:
    return {f.code for f in diagnose(trace, command)}


def starved_trace() -> Trace:
    """GPU 10-30 % while all 8 cores are at 95-100 %."""
    return recorded(noise(10, 30, 1), [30.0], noise(95, 100, 2, (8, N)))


def healthy_trace() -> Trace:
    """GPU 93-98 %, 60 of 80 GiB, CPU moderately busy."""
    return recorded(noise(93, 98, 3), [60.0], noise(40, 70, 4, (8, N)))


def test_data_starved_by_cpu():
    findings = diagnose(starved_trace(), source="/data/c256")
    assert [f.code for f in findings] == ["data-starved"]
    starved = findings[0]
    assert any("mean GPU utilisation 20%" in e for e in starved.evidence)
    assert any("8 of 8 cores" in e for e in starved.evidence)
    advice = " ".join(starved.advice)
    assert "iofeed preprocess /data/c256" in advice and 'engine="dali"' in advice
    assert not starved.heuristic


def test_traces_saved_before_the_process_split_still_load():
    old = {k: v for k, v in starved_trace().to_dict().items() if k not in ("trainer_cpu", "loader_cpu")}
    trace = Trace.from_dict(old)
    assert trace.loader_cpu.shape == (0, N) and not trace.trainer_cpu.any()
    assert [f.code for f in diagnose(trace)] == ["data-starved"]


def test_data_starved_by_storage():
    trace = recorded(noise(10, 30, 5), [30.0], noise(20, 40, 6, (8, N)), iowait=noise(20, 40, 7))
    (starved,) = diagnose(trace)
    assert starved.code == "data-starved"
    assert any("wait on storage" in e for e in starved.evidence)
    assert any("workers=16" in a for a in starved.advice)


def test_cpu_and_gpu_taking_turns():
    """2 s cycles: the workers decode (CPU 80-90 %, GPU idle), then the GPU computes alone; the
    GPU readings trail by 0.2 s as NVML's averaging period makes them."""
    phase = (np.arange(N) // 10) % 2 == 0
    cpu = np.where(phase, noise(80, 90, 8), noise(3, 8, 9))
    gpu = np.roll(np.where(phase, noise(0, 5, 10), noise(90, 98, 11)), 2)
    trace = recorded(gpu, [40.0], np.tile(cpu, (8, 1)))
    findings = {f.code: f for f in diagnose(trace)}
    assert set(findings) == {"cpu-gpu-alternating"}
    assert any("prefetch=" in a for a in findings["cpu-gpu-alternating"].advice)
    assert summarize(trace)["gpu_cpu_correlation"] < -0.9


def test_turns_without_idle_phases_are_not_alternating():
    """GPU between 85 and 98 %, slightly lower when the CPU is busier: anti-correlated, never idle."""
    phase = (np.arange(N) // 10) % 2 == 0
    cpu = np.where(phase, noise(60, 70, 29), noise(40, 50, 30))
    gpu = np.where(phase, noise(85, 90, 31), noise(93, 98, 32))
    trace = recorded(gpu, [40.0], np.tile(cpu, (8, 1)))
    assert summarize(trace)["gpu_cpu_correlation"] < -0.8 and codes(trace) == set()


def test_small_batch():
    """GPU 25-40 %, 6 of 80 GiB; one core runs the training loop, the rest idle."""
    cpu = np.vstack([noise(95, 100, 12), noise(0, 8, 13, (7, N))])
    findings = diagnose(recorded(noise(25, 40, 14), [6.0], cpu))
    assert [f.code for f in findings] == ["small-batch"]
    assert any("batch_size" in a for a in findings[0].advice)


def test_one_saturated_loader_worker_is_few_workers_not_small_batch():
    """The classic starved run on an H100 host: one DataLoader worker at 100 % of its core (beside
    the idle forkserver process that started it), the training loop on another core, 14 cores idle,
    GPU 15-20 %, 10 of 80 GiB: too few workers, measured (not "raise the batch size")."""
    cpu = np.vstack([noise(95, 100, 40, (2, N)), noise(0, 3, 41, (14, N))])
    loaders = np.vstack([noise(96, 100, 43), noise(0, 1, 48)])
    findings = diagnose(recorded(noise(15, 20, 42), [10.0], cpu, loader_cpu=loaders), source="/data/c256")
    assert [f.code for f in findings] == ["few-workers"]
    assert not findings[0].heuristic
    evidence, advice = " ".join(findings[0].evidence), " ".join(findings[0].advice)
    assert "1 loader process(es) at a time, each 98% of a core" in evidence
    assert "workers=None" in advice and "workers=15" in advice and "iofeed preprocess /data/c256" in advice


def test_workers_replaced_every_epoch_count_over_their_own_lives():
    """A plain DataLoader starts new workers each epoch: four in turn, each saturated while it lives."""
    cpu = np.vstack([noise(95, 100, 52, (2, N)), noise(0, 3, 53, (14, N))])
    workers = np.full((4, N), np.nan)
    for k in range(4):
        workers[k, k * 75 + 1:(k + 1) * 75] = noise(95, 100, 54 + k, (74,))
    findings = diagnose(recorded(noise(15, 20, 58), [10.0], cpu, loader_cpu=workers))
    assert [f.code for f in findings] == ["few-workers"] and not findings[0].heuristic
    assert any("1 loader process(es) at a time, each 98% of a core" in e for e in findings[0].evidence)


def test_idle_loaders_leave_small_batch():
    """Four loader workers mostly waiting (20 % of a core each): the batch is the problem, not them."""
    cpu = np.vstack([noise(95, 100, 44), noise(0, 20, 45, (7, N))])
    findings = diagnose(recorded(noise(25, 40, 46), [6.0], cpu, loader_cpu=noise(10, 30, 47, (4, N))))
    assert [f.code for f in findings] == ["small-batch"]


def test_a_worker_waiting_half_the_time_is_not_saturated():
    """A worker busy in bursts (100 % or 0 %, blocked on a full queue) is not the bottleneck."""
    cpu = np.vstack([noise(95, 100, 49, (2, N)), noise(0, 3, 50, (14, N))])
    bursts = np.where((np.arange(N) // 5) % 2 == 0, 100.0, 0.0)[None, :]
    findings = diagnose(recorded(noise(15, 20, 51), [10.0], cpu, loader_cpu=bursts))
    assert [f.code for f in findings] == ["small-batch"]


def test_few_workers_when_memory_is_used():
    cpu = np.vstack([noise(95, 100, 15, (2, N)), noise(0, 4, 16, (6, N))])
    findings = diagnose(recorded(noise(20, 35, 17), [60.0], cpu))
    assert [f.code for f in findings] == ["few-workers"] and findings[0].heuristic
    assert any("workers=None" in a for a in findings[0].advice)


def test_uneven_memory_across_gpus():
    """DataParallel on 2 GPUs: GPU 0 gathers the outputs, holds 30 GiB against 12."""
    util = np.vstack([noise(90, 98, 18), noise(65, 80, 19)])
    findings = {f.code: f for f in diagnose(recorded(util, [[30.0], [12.0]], noise(40, 60, 20, (8, N))))}
    assert set(findings) == {"uneven-gpu-memory"}
    evidence = " ".join(findings["uneven-gpu-memory"].evidence)
    assert "GPU 0 30.0 GiB, GPU 1 12.0 GiB: 2.5x" in evidence and "DataParallel" in evidence
    assert any("DistributedDataParallel" in a for a in findings["uneven-gpu-memory"].advice)


def test_even_memory_across_gpus_is_fine():
    util = np.vstack([noise(90, 98, 21), noise(90, 98, 22)])
    assert codes(recorded(util, [[30.0], [29.0]], noise(40, 60, 23, (8, N)))) == set()


def test_healthy_trace_has_no_findings():
    assert codes(healthy_trace()) == set()


def test_start_up_before_the_gpu_works_is_not_judged():
    """10 s of imports and model loading (GPU idle, one core busy) before healthy training."""
    gpu = np.where(np.arange(N) < 100, 0.0, noise(93, 98, 24))
    cpu = np.where(np.arange(N) < 100, 12.0, noise(40, 70, 25, (8, N)))
    trace = recorded(gpu, [60.0], cpu)
    assert codes(trace) == set()
    assert summarize(trace)["active_window"] == pytest.approx([10.1, 30.0])


def test_unused_gpu_and_short_trace():
    assert codes(recorded(np.zeros(N), [0.5], noise(90, 100, 26, (8, N)))) == {"gpu-unused"}
    blip = np.where(np.arange(N) == 150, 60.0, 0.0)
    assert codes(recorded(blip, [10.0], noise(10, 20, 27, (8, N)))) == {"short-trace"}


def test_no_gpu_means_no_gpu_patterns():
    trace = recorded(np.zeros((0, N)), np.zeros((0, 1)), noise(95, 100, 28, (2, N)))
    assert trace.gpus == 0 and diagnose(trace) == []
    assert summarize(trace)["cpu_busy_mean"] == pytest.approx(97.5, abs=1)


def test_mixed_precision_guessed_from_the_script(tmp_path):
    plain = tmp_path / "train.py"
    plain.write_text("model = build()\nfor x, y in loader:\n    loss = model(x).sum()\n")
    command = [sys.executable, str(plain), "--epochs", "1"]
    (finding,) = [f for f in diagnose(healthy_trace(), command) if f.code == "no-mixed-precision"]
    assert finding.heuristic and "train.py" in finding.evidence[0]
    assert any("torch.autocast" in a for a in finding.advice)
    assert mixed_precision_finding([*command, "--precision", "bf16"]) is None
    launcher = ["python", "-m", "torch.distributed.run", "--nproc_per_node=2", "train.py"]
    assert mixed_precision_finding(launcher, cwd=tmp_path) is not None  # found train.py after the launcher
    assert mixed_precision_finding(["python", "-m", "train"], cwd=tmp_path) is not None
    (tmp_path / "engine.py").write_text("with torch.autocast('cuda', dtype=torch.bfloat16):\n    pass\n")
    assert mixed_precision_finding(command) is None  # the helper beside the script uses it
    assert mixed_precision_finding(launcher, cwd=tmp_path) is None
    assert mixed_precision_finding(["python", "-c", "x = model.half()"]) is None
    assert mixed_precision_finding(["python", "-c", "print(1)"]) is not None
    assert mixed_precision_finding(["./train_binary", "--lr", "0.1"]) is None  # no code to read: no guess


def test_record_a_cpu_only_command():
    code = "import time\nt = time.time()\nwhile time.time() - t < 1.0:\n    pass\nraise SystemExit(3)"
    rec = record([sys.executable, "-c", code], interval=0.05)
    trace = rec.trace
    assert rec.exit_code == 3 and not rec.interrupted and rec.seconds >= 1.0
    assert trace.gpus == 0 and trace.gpu_util.shape == (0, len(trace.t))
    assert trace.cores == len(os.sched_getaffinity(0)) and trace.cpu.shape == (trace.cores, len(trace.t))
    assert len(trace.t) >= 10 and np.all(np.diff(trace.t) > 0)
    assert np.all((trace.cpu >= 0) & (trace.cpu <= 100))
    assert trace.cpu.mean(axis=0).max() >= 100 / trace.cores * 0.5  # the busy loop shows
    assert trace.rss.max() > 5 * 2**20  # a Python interpreter's memory
    assert diagnose(trace, rec.command) == []


def test_record_splits_training_and_loader_cpu():
    """A command whose child process spins for a second: the child is a loader, the sleeping command the trainer."""
    spin = "import time\nt = time.time()\nwhile time.time() - t < 1.5:\n    pass"
    code = f"import subprocess, sys\nsubprocess.run([sys.executable, '-c', {spin!r}], check=True)"
    trace = record([sys.executable, "-c", code], interval=0.05).trace
    assert trace.loader_cpu.shape == (1, len(trace.t))
    alive = np.flatnonzero(~np.isnan(trace.loader_cpu[0]))
    assert np.isnan(trace.loader_cpu[0, :alive[0]]).all() and np.isnan(trace.loader_cpu[0, alive[-1] + 1:]).all()
    spinning = trace.loader_cpu[0, alive]
    # The spinner's share of a core depends on what else the machine runs (a third of one under
    # four CPU hogs on two cores): what must hold is that its CPU is the loader's, not the trainer's.
    trainer = trace.trainer_cpu[alive].mean()
    assert len(spinning) >= 10 and spinning.mean() > 10 and spinning.mean() > 4 * trainer, (spinning.mean(), trainer)
    summary = summarize(trace)
    assert summary["loaders_at_once"] == 1 and summary["loader_cpu_per_process"] > 4 * trainer
    strict = json.loads(json.dumps(trace.to_dict(), allow_nan=False))
    assert Trace.from_dict(strict).loader_cpu.shape == (1, len(trace.t))


@pytest.mark.torch
@pytest.mark.slow
def test_the_starved_training_script_runs_under_record(colour_tree):
    """bench/starved_train.py (what doctor is shown against on a GPU) runs here on the CPU, with its
    DataLoader worker seen as a loader process and its autocast seen by the precision check."""
    script = Path(__file__).resolve().parents[1] / "bench" / "starved_train.py"
    command = [sys.executable, str(script), str(colour_tree), "--batch-size", "4", "--image-size", "32",
               "--max-steps", "3", "--seconds", "120"]
    rec = record(command, interval=0.05)
    assert rec.exit_code == 0
    assert rec.trace.loader_cpu.shape[0] >= 1 and np.nanmax(rec.trace.loader_cpu) > 0
    assert mixed_precision_finding(command) is None


def test_record_refuses_bad_commands():
    with pytest.raises(OptionError, match="cannot run"):
        record(["iofeed-no-such-program"])
    with pytest.raises(OptionError, match="empty command"):
        record([])


@pytest.mark.gpu
def test_record_sees_the_gpu_work():
    code = ("import time, torch\nx = torch.randn(8192, 8192, device='cuda')\nt = time.time()\n"
            "while time.time() - t < 3:\n    x = (x @ x).tanh_()\ntorch.cuda.synchronize()")
    trace = record([sys.executable, "-c", code]).trace
    assert trace.gpus >= 1 and trace.gpu_util.max() >= 50
    assert trace.gpu_mem.max(axis=1)[0] - trace.gpu_mem[0, 0] >= 2**28  # 256 MiB of tensors at least
    assert summarize(trace)["active_window"] is not None


def test_data_check_names_a_truncated_jpeg_whose_header_reads(tmp_path):
    """A JPEG cut in half keeps its header: the header pass counts it as a JPEG, and the decode
    pass, which did fail on it, passed it over unsaid, so doctor found nothing wrong with a file
    preprocess rejects and a DataLoader fails on mid-epoch."""
    src = tmp_path / "src"
    make_image_tree(src, classes=2, per_class=4)
    cut = sorted(src.rglob("*.jpg"))[0]
    cut.write_bytes(cut.read_bytes()[: cut.stat().st_size // 2])
    check = check_data(src, decode_sample=100)
    name = cut.relative_to(src).as_posix()
    assert check.formats == {"jpeg": 8}, "the header pass reads it"
    assert len(check.bad) == 1 and check.bad[0].startswith(f"{name}: corrupt or truncated image"), check.bad
    assert check.decode["images"] == 7, "timed over the 7 that decode"
    assert [f.code for f in check.findings if f.code == "bad-files"] == ["bad-files"]


def test_data_check_counts_quirky_jpegs(quirky_tree):
    src, _, _ = quirky_tree
    check = check_data(src, decode_sample=10)
    assert check.kind == "folder" and check.sampled == check.total
    assert [Path(p).name for p in check.progressive] == ["progressive.jpg"]
    assert [Path(p).name for p in check.cmyk] == ["cmyk.jpg"]
    assert check.formats["png"] == 3 and check.modes["CMYK"] == 1
    assert check.formats["not an image"] >= 2 and any("RENAME2" in b for b in check.bad)
    assert check.decode["images"] == 10 and check.decode["original_per_sec"] > 0
    found = {f.code: f for f in check.findings}
    assert {"gpu-decoder-quirks", "not-jpeg", "bad-files"} <= set(found)
    quirks = " ".join(found["gpu-decoder-quirks"].evidence)
    assert "1 of" in quirks and "progressive" in quirks and "CMYK" in quirks
    assert "preprocess-pays" not in found  # median image is below 256 px: nothing to resize


def test_data_check_says_when_resizing_pays(tmp_path):
    root = tmp_path / "big"
    for c in range(2):
        (root / f"class{c}").mkdir(parents=True)
        for i in range(3):
            (root / f"class{c}" / f"{i}.jpg").write_bytes(jpeg_bytes(smooth_rgb(1600, 1200, seed=10 * c + i)))
    check = check_data(root)
    assert check.shorter_side["p50"] == 1200 and check.large_share == 1.0
    assert check.decode["resized_per_sec"] > 2 * check.decode["original_per_sec"]
    (pays,) = [f for f in check.findings if f.code == "preprocess-pays"]
    assert f"iofeed preprocess {root}" in pays.advice[0]


def test_data_check_of_a_clean_folder_finds_nothing(tmp_path):
    make_image_tree(tmp_path / "tree")
    check = check_data(tmp_path / "tree")
    assert check.formats == {"jpeg": 18} and check.findings == []
    with pytest.raises(SourceError, match="nowhere"):
        check_data(tmp_path / "nowhere")


def test_data_check_of_iofeed_datasets(tmp_path, colour_tree):
    from iofeed.prepare.run import ImagePolicy, preprocess

    for form, decoded in (("jpeg", True), ("raw", False)):
        out = tmp_path / f"{form}.iof"
        preprocess(colour_tree, out, policy=ImagePolicy(shorter_side=64, format=form), val_per_class=2,
                   progress=False, workers=1)
        check = check_data(out)
        assert check.kind == "dataset" and check.total == check.sampled == 32
        assert check.formats == {form: 32} and check.shorter_side["p95"] == 64 and check.bad == []
        assert ("original_per_sec" in check.decode) == decoded and check.findings == []


def test_environment_check_runs_without_gpu():
    env = check_environment()
    assert env.cores >= env.usable_cores >= 1 and env.ram_bytes > 0
    assert env.versions["pillow"] and env.versions["numpy"]
    try:
        import torch
        cuda = torch.cuda.is_available()
    except ImportError:
        cuda = False
    assert bool(env.gpus) == cuda and (env.gpu_note is None) == cuda
    small = dataclasses.replace(env, shm_bytes=64 * 2**20, shm_free_bytes=60 * 2**20)
    assert "small-shm" in {f.code for f in environment_findings(small)}


def test_cli_end_to_end(tmp_path, capsys):
    make_image_tree(tmp_path / "tree")
    out = tmp_path / "out" / "doctor.json"
    code = "import time\nt = time.time()\nwhile time.time() - t < 0.8:\n    pass"
    assert main(["doctor", str(tmp_path / "tree"), "--json", str(out), "--interval", "0.05",
                 "--", sys.executable, "-c", code]) == 0
    printed = capsys.readouterr().out
    assert "environment" in printed and "data" in printed and "exited with status 0" in printed
    assert "processes: training" in printed and "no working loader processes" in printed
    doc = json.loads(out.read_text())
    assert doc["format"] == "iofeed-doctor" and set(doc) >= {"environment", "data", "trace", "findings"}
    assert doc["environment"]["cores"] >= 1 and doc["data"]["formats"] == {"jpeg": 18}
    trace = doc["trace"]
    assert trace["command"][-1] == code and trace["exit_code"] == 0
    assert trace["summary"]["gpus"] == 0 and trace["summary"]["samples"] >= 8
    samples = Trace.from_dict(trace["samples"])
    assert len(samples.t) == trace["summary"]["samples"] and samples.cpu.shape[0] == trace["summary"]["cores"]
    png = out.with_suffix(".png")
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 10_000


def test_cli_without_command_checks_only(tmp_path, capsys):
    make_image_tree(tmp_path / "tree")
    assert main(["doctor", str(tmp_path / "tree")]) == 0
    printed = capsys.readouterr().out
    assert "18 files" in printed and "trace" not in printed


@pytest.mark.parametrize("args, message", [
    (["{tmp}/nowhere"], "nowhere"),
    (["{tmp}/tree", "--", "iofeed-no-such-program", "--x"], "command not found: iofeed-no-such-program"),
    (["{tmp}/tree", "--"], "empty command"),
    (["{tmp}/tree", "--plot", "{tmp}/p.png"], "--plot needs a command"),
    (["--interval", "0", "--", sys.executable, "-c", "pass"], "interval must be > 0"),
])
def test_cli_bad_input_fails_with_one_line(tmp_path, capsys, args, message):
    make_image_tree(tmp_path / "tree", classes=1, per_class=1)
    assert main(["doctor", *(a.format(tmp=tmp_path) for a in args)]) == 1
    err = capsys.readouterr().err
    assert err.startswith("iofeed: error:") and message in err and err.count("\n") == 1


def test_cli_a_failed_command_is_said_first_and_sets_the_exit_status(capsys):
    """It used to report "no findings" and exit 0 for `cli/doctor -- python nonexist.py`."""
    code = main(["doctor", "--interval", "0.05", "--", sys.executable, "-c", "import sys; sys.exit(3)"])
    printed = capsys.readouterr().out.splitlines()
    assert code == 3
    assert printed[0] == "iofeed doctor" and "the traced command FAILED" in printed[1] and "status 3" in printed[1]
    assert printed[-1] == "no findings (the traced command failed: see above)"
    assert any(" trace samples, peak memory" in line for line in printed), "samples of the trace, not images"


def test_cli_a_command_without_the_double_dash_gets_a_hint(tmp_path, capsys):
    """`iofeed doctor SRC python train.py` used to print the top-level usage."""
    make_image_tree(tmp_path / "tree", classes=1, per_class=1)
    assert main(["doctor", str(tmp_path / "tree"), "python", "train.py"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "unrecognized arguments: python train.py" in err
    assert f"iofeed doctor {tmp_path / 'tree'} -- python train.py" in err


def test_cli_a_missing_doctor_extra_names_its_pip_command_before_tracing(tmp_path, capsys, monkeypatch):
    """The timeline needs matplotlib: it used to fail after the whole trace with ModuleNotFoundError."""
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    out = tmp_path / "d.json"
    assert main(["doctor", "--json", str(out), "--", sys.executable, "-c", "open('ran', 'w')"]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "matplotlib is not installed: run `pip install 'iofeed[doctor]'`" in err
    assert not out.exists() and not os.path.exists("ran"), "nothing traced"


def test_the_data_check_is_of_what_the_command_reads_not_of_the_source_given(tmp_path, capsys, monkeypatch):
    """`iofeed doctor data/c256 -- python train.py` advised preprocessing data/c256 when train.py
    already read data/c256.iof: the loader's stats say what it opened, and that is what is checked."""
    from iofeed.prepare.run import preprocess

    root = tmp_path / "big"
    for c in range(2):
        (root / f"class{c}").mkdir(parents=True)
        for i in range(3):
            (root / f"class{c}" / f"{i}.jpg").write_bytes(jpeg_bytes(smooth_rgb(1600, 1200, seed=10 * c + i)))
    assert "preprocess-pays" in {f.code for f in check_data(root).findings}, "the folder alone would be advised"
    preprocess(root, tmp_path / "big.iof", val_per_class=0, progress=False, workers=1)
    monkeypatch.chdir(tmp_path)  # the command names the dataset relative to where it runs
    train = ("import iofeed\n"
             "with iofeed.loader('big.iof', batch_size=2, image_size=32, workers=1) as loader:\n"
             "    for images, labels in loader:\n"
             "        pass\n")
    out = tmp_path / "doctor.json"
    assert main(["doctor", str(root), "--json", str(out), "--interval", "0.1", "--", sys.executable, "-c", train]) == 0
    printed = capsys.readouterr().out
    doc = json.loads(out.read_text())
    assert doc["data"]["source"] == str(tmp_path / "big.iof") and doc["data"]["kind"] == "dataset"
    assert "preprocess-pays" not in {f["code"] for f in doc["findings"]}, doc["findings"]
    assert f"read {tmp_path / 'big.iof'}, not {root}" in printed, printed


def test_images_over_pillows_bomb_limit_are_counted_not_warned_one_by_one(tmp_path, monkeypatch):
    """`cli/doctor` printed Pillow's DecompressionBombWarning for every such image."""
    import warnings

    from PIL import Image

    root = tmp_path / "huge"
    for c in range(2):
        (root / f"class{c}").mkdir(parents=True)
        for i in range(2):
            (root / f"class{c}" / f"{i}.jpg").write_bytes(jpeg_bytes(smooth_rgb(1600, 1200, seed=10 * c + i)))
    (root / "class0" / "small.jpg").write_bytes(jpeg_bytes(smooth_rgb(64, 48, seed=1)))
    monkeypatch.setattr(Image, "MAX_IMAGE_PIXELS", 1_000_000)  # 1600x1200 is over it, under twice it
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        check = check_data(root)
    (note,) = [n for n in check.notes if "decompression-bomb" in n]
    assert note.startswith("4 of 5 sampled images are over Pillow's decompression-bomb limit of 1 MP"), note
    assert "(1600x1200)" in note and check.bad == []
