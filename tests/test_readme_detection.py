"""The README's detection and segmentation examples run as written (COCO stand-in, torchvision's
fasterrcnn_mobilenet_v3_large_fpn and lraspp_mobilenet_v3_large without downloaded weights, a few
CPU steps each)."""
from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from iofeed.prepare.run import preprocess
from iofeed.prepare.synth_coco import synth_coco

README = Path(__file__).resolve().parents[1] / "README.md"


@pytest.mark.slow
@pytest.mark.torch
@pytest.mark.torchvision
@pytest.mark.parametrize("name", ["train_detection", "train_segmentation"])
def test_readme_detection_example_trains_a_few_steps(tmp_path: Path, name: str) -> None:
    pytest.importorskip("torchvision")
    code = re.search(rf"```python\n# {name}\.py\n(.*?)```", README.read_text(), re.S)
    assert code is not None, f"README has the {name}.py block"
    synth_coco(tmp_path / "coco", images=24, seed=1)
    preprocess(tmp_path / "coco", tmp_path / "coco.iof", workers=1, progress=False)
    script = code.group(1).replace('"data/coco.iof"', repr(str(tmp_path / "coco.iof")))
    (tmp_path / f"{name}.py").write_text(script)
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1] / "src")}
    run = subprocess.run([sys.executable, f"{name}.py"], cwd=tmp_path, env=env, capture_output=True,
                         text=True, timeout=600)
    assert run.returncode == 0, run.stderr[-3000:]
    losses = [float(v) for v in re.findall(r"loss (\d+\.\d+)", run.stdout)]
    assert len(losses) == 3 and all(v > 0 for v in losses), run.stdout
