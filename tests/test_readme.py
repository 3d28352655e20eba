"""The README as someone new to it reads it: its commands and its snippet run as written (issue 23)."""
from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from iofeed.cli.main import build_parser

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text(encoding="utf-8")


def blocks(language: str) -> list[str]:
    """The README's fenced code blocks in `language`, in order."""
    return [body for lang, body in re.findall(r"```(\w+)\n(.*?)```", README, re.S) if lang == language]


def command_lines(program: str) -> list[str]:
    """Every line of the README's bash blocks that runs `program`, without its comment."""
    lines = [" ".join(shlex.split(line, comments=True)) for block in blocks("bash") for line in block.splitlines()]
    return [line for line in lines if line.split(" ", 1)[0] == program]


def test_every_iofeed_command_in_the_readme_parses():
    commands = command_lines("iofeed")
    assert len(commands) >= 5, commands
    for line in commands:
        argv = shlex.split(line)[1:]
        if "--" in argv:  # `iofeed doctor ... -- COMMAND`: the CLI takes the command off first
            argv = argv[:argv.index("--")]
        build_parser().parse_args(argv)  # SystemExit (usage) would fail the test


def test_the_readme_says_how_to_reach_iofeed_and_what_the_main_job_costs():
    """After the two commands a bare `iofeed` was "command not found", and nothing said that the
    main job takes ~15 min and ~16 GB."""
    top = README.split("\n## ", 1)[0]
    assert "source .venv/bin/activate" in top and ".venv/bin/iofeed" in top
    assert re.search(r"~\d+–\d+ min on 2 cores", top) and re.search(r"~\d+ GB of disk", top)
    assert "data/c256.bench/" in top, "where the results go"
    scripts = command_lines("bash")
    assert scripts == ["bash scripts/bench.sh", "bash scripts/test.sh"]
    for line in scripts:
        subprocess.run(["bash", "-n", str(ROOT / line.split()[1])], check=True)


def _shell(tmp_path: Path) -> dict[str, str]:
    """An environment where `iofeed` and `python` are this interpreter's, with this checkout's iofeed."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name, run in (("iofeed", f'"{sys.executable}" -m iofeed.cli.main'), ("python", f'"{sys.executable}"')):
        (bin_dir / name).write_text(f'#!/bin/sh\nexec {run} "$@"\n')
        (bin_dir / name).chmod(0o755)
    path = os.pathsep.join([str(ROOT / "src"), os.environ.get("PYTHONPATH", "")])
    return {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}", "PYTHONPATH": path}


def _run(line: str, cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", "-c", line], cwd=cwd, env=env, capture_output=True, text=True, timeout=300)


@pytest.mark.torch
@pytest.mark.slow
def test_the_readme_commands_and_snippet_run_as_written(tmp_path):
    """In a fresh folder: the "Prepare a dataset once" block (a small stand-in: the one change), the
    two-line snippet as `train.py`, `cli/doctor` tracing it, and `bench` (shortened) on the result."""
    env, cwd = _shell(tmp_path), tmp_path / "work"
    cwd.mkdir()
    prepare = [line for line in command_lines("iofeed") if line.split()[1] in ("synth", "preprocess", "inspect")]
    assert [line.split()[1] for line in prepare][:3] == ["synth", "preprocess", "inspect"]
    for line in prepare[:3]:
        done = _run(line + (" --per-class 2" if " synth " in line else ""), cwd, env)
        assert done.returncode == 0, (line, done.stderr[-2000:])
    assert "samples in" in done.stdout

    (snippet,) = [b for b in blocks("python") if 'placement=iofeed.Placement(device="cuda")' in b]  # the two lines
    (cwd / "train.py").write_text(snippet)
    done = _run("python train.py", cwd, env)
    from helpers.requirements import cuda_available

    if cuda_available():
        assert done.returncode == 0, done.stderr[-2000:]
    else:  # one line naming the fix, not PyTorch's driver traceback
        assert done.returncode == 1
        assert done.stderr.strip().splitlines()[-1] == (
            "iofeed.errors.OptionError: Placement.device='cuda', but no CUDA device is available here: pass "
            "placement=iofeed.Placement(device='cpu') (or leave placement out)")
        assert "torch/cuda" not in done.stderr
    (cwd / "train.py").write_text(snippet.replace('Placement(device="cuda")', 'Placement(device="cpu")'))
    assert _run("python train.py", cwd, env).returncode == 0

    (doctor,) = [line for line in command_lines("iofeed") if line.split()[1] == "doctor"]
    done = _run(doctor, cwd, env)
    assert done.returncode == 0 and "`python train.py` exited with status 0" in done.stdout, done.stderr[-2000:]

    (bench,) = [line for line in command_lines("iofeed") if line.split()[1] == "bench"]
    done = _run(bench + " --feeds iofeed-dataset --seconds 0.4 --rounds 1 --warmup 0 --batch-size 8", cwd, env)
    assert done.returncode == 0, done.stderr[-2000:]
    assert len(list((cwd / "data" / "c256.bench").glob("bench-*.png"))) == 1
    assert sorted(p.name for p in cwd.iterdir()) == ["data", "train.py"], "nothing else where the commands ran"


def test_the_scripts_say_what_they_do_before_each_long_step():
    """The first ~3 minutes of the main job printed nothing while pip installed."""
    for script, heavy in (("setup-env.sh", ("pip install", "-m venv")), ("bench.sh", ("setup-env.sh", " synth ",
                                                                                      " preprocess ", " bench "))):
        lines = [line.strip() for line in (ROOT / "scripts" / script).read_text().splitlines()
                 if line.strip() and not line.lstrip().startswith("#")]
        runs = [i for i, line in enumerate(lines) if any(word in line for word in heavy) and "say " not in line]
        assert runs, script
        for i in runs:  # the nearest earlier line that does something is `say ...` (or a pip step after one)
            before = [line for line in lines[:i] if not line.startswith(("if ", "fi", "then", "|"))]
            assert any(line.startswith("say ") for line in before[-3:]), (script, lines[i])


def test_generated_bench_results_stay_out_of_git_status():
    ignored = (ROOT / ".gitignore").read_text().splitlines()
    assert "*.bench/" in ignored and "data/" in ignored
