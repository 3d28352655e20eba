"""README's "One snippet per framework": each block runs as written, on a tiny dataset."""
from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SECTION = "## One snippet per framework"
MARKS = {"numpy": [], "torch": [pytest.mark.torch], "tf": [pytest.mark.tf], "jax": [pytest.mark.jax],
         "keras": [pytest.mark.keras, pytest.mark.jax]}


def snippets() -> dict[str, str]:
    """framework -> code of its block (the first line names it: `# framework="NAME"`)."""
    text = ROOT.joinpath("README.md").read_text()
    section = text.split(SECTION, 1)[1].split("\n## ", 1)[0]
    blocks = re.findall(r"```python\n(.*?)```", section, re.S)
    return {re.match(r'# framework="(\w+)"', block).group(1): block for block in blocks}


def test_every_framework_has_a_snippet():
    from iofeed.options.adapter_choices import ADAPTERS

    assert sorted(snippets()) == sorted(ADAPTERS.names())


@pytest.mark.slow
@pytest.mark.parametrize("framework", [pytest.param(name, marks=marks) for name, marks in MARKS.items()])
def test_readme_snippet_runs(colour_dataset, framework):
    if framework == "jax":
        pytest.importorskip("optax")  # the snippet's optimiser (not an iofeed dependency)
    code = snippets()[framework]
    assert code.count("data/c256.iof") >= 1 and "batch_size=64" in code
    code = code.replace("data/c256.iof", str(colour_dataset)).replace("batch_size=64", "batch_size=4")
    path = os.pathsep.join([str(ROOT / "src"), os.environ.get("PYTHONPATH", "")])
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300,
                         env={**os.environ, "PYTHONPATH": path, "TF_CPP_MIN_LOG_LEVEL": "2", "KERAS_BACKEND": "jax"})
    assert run.returncode == 0, run.stderr[-3000:]
