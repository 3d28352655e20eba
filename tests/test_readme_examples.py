"""The README's own-recipe examples run as written (torchvision v2, albumentations, numpy), with
the dataset path and the batch size swapped for the test's."""
from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

README = Path(__file__).resolve().parents[1] / "README.md"
BLOCK = re.compile(r"```python\n# (\w+\.py)\n(.*?)```", re.S)


def examples() -> dict[str, str]:
    """{file name: code} of the README's python blocks that start with `# name.py`."""
    return {name: code for name, code in BLOCK.findall(README.read_text())}


def test_the_readme_has_the_three_examples():
    assert {"train_torchvision.py", "train_albumentations.py", "train_numpy.py", "augment.py"} <= set(examples())


@pytest.mark.slow
@pytest.mark.torch
@pytest.mark.parametrize("script", [pytest.param("train_torchvision.py", marks=pytest.mark.torchvision),
                                    pytest.param("train_albumentations.py", marks=pytest.mark.albumentations),
                                    "train_numpy.py"])
def test_readme_example_runs(script, colour_dataset, tmp_path):
    for name, code in examples().items():
        code = code.replace('"data/c256.iof"', repr(str(colour_dataset))).replace("batch_size=256", "batch_size=8")
        (tmp_path / name).write_text(code)
    src = Path(__file__).resolve().parents[1] / "src"
    env = {**os.environ, "PYTHONPATH": str(src)}  # augment.py is found beside the script, as for a user
    run = subprocess.run([sys.executable, script], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr[-3000:]
    assert re.search(r"\d+\.\d\d ms/image in the transform", run.stdout), run.stdout
