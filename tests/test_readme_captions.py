"""The README's captions example runs as written on img2dataset-style shards (the adversarial
captions builder's clean ones: each caption spells its image's sample number)."""
from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from helpers.adversarial_captions import caption_of, captions

README = Path(__file__).resolve().parents[1] / "README.md"
BASH = re.compile(r"```bash\n(iofeed preprocess \"shards/.*?--target text)\n```", re.S)
BLOCK = re.compile(r"```python\n# captions\.py\n(.*?)```", re.S)


@pytest.mark.torch
def test_readme_captions_example_prints_a_caption_as_written(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    command, code = BASH.search(README.read_text()), BLOCK.search(README.read_text())
    assert command is not None and code is not None, "README has the captions blocks"
    source = captions(tmp_path, "clean")
    (tmp_path / "shards").symlink_to(source.shards[0].parent)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    args = [a.strip('"') for a in command.group(1).split()[1:]]
    cli = "import sys, runpy\nsys.argv[0] = 'iofeed'\nrunpy.run_module('iofeed.cli.main', run_name='__main__')"
    done = subprocess.run([sys.executable, "-c", cli, *args, "--workers", "1"], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    (tmp_path / "captions.py").write_text(code.group(1))
    run = subprocess.run([sys.executable, "captions.py"], cwd=tmp_path, env=env, capture_output=True, text=True,
                         timeout=600)
    assert run.returncode == 0, run.stderr[-3000:]
    shape, text = re.fullmatch(r"\((.*?)\) (.*)\n", run.stdout).groups()
    assert shape == "8, 3, 224, 224"
    assert text in {repr(caption_of(n)) for n in range(24)}, text
