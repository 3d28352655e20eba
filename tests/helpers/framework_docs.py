"""Running docs/frameworks/*.md as written: each page's blocks from its first `iofeed` call on, in
the namespace a real script has at that point, on stand-in data laid out as that script expects
(class folders whose pixels say their class, so a mislabel shows)."""
from __future__ import annotations

import os
import re
import shlex
from pathlib import Path
from typing import Any

import numpy as np
from PIL import Image

from helpers.images import jpeg_bytes
from helpers.pixelcode import colour

ROOT = Path(__file__).resolve().parents[2]
CODES = (2, 6, 18, 22, 24, 8)  # pixelcode colours far apart from each other: class i is colour(CODES[i])


def page(name: str) -> str:
    return (ROOT / "docs" / "frameworks" / f"{name}.md").read_text(encoding="utf-8")


def section_blocks(name: str, heading: str) -> list[tuple[str, str]]:
    """(language, body) of the fenced blocks under the `## heading` of page `name`, in order."""
    text = page(name).split(f"\n## {heading}", 1)[1].split("\n## ", 1)[0]
    return re.findall(r"```(\w+)\n(.*?)```", text, re.S)


def iofeed_blocks(name: str, heading: str) -> list[tuple[str, str]]:
    """The section's blocks from the first that calls iofeed on: the lines that replace the script's
    (the blocks before quote the script as it was)."""
    blocks = section_blocks(name, heading)
    first = next(i for i, (_, body) in enumerate(blocks) if "iofeed" in body)
    return blocks[first:]


def run_python(body: str, namespace: dict[str, Any], where: str) -> None:
    """Run a python block as written in `namespace`."""
    exec(compile(body, where, "exec"), namespace)  # noqa: S102 - the page's own code, run as written


def write_module(body: str, folder: Path) -> str:
    """A block that starts `# NAME.py` written as NAME.py into `folder` (on sys.path); its NAME."""
    name = re.match(r"# (\w+)\.py\n", body)[1]
    (folder / f"{name}.py").write_text(body)
    return name


def run_bash(body: str, cwd: Path, env: dict[str, str] | None = None) -> list[list[str]]:
    """Every `iofeed ...` line of a bash block, run by iofeed's own command line in `cwd` with the
    variables of `env`; the argument lists run."""
    from iofeed.cli.main import main

    ran = []
    before = Path.cwd()
    saved = {k: os.environ.get(k) for k in (env or {})}
    os.environ.update(env or {})
    try:
        os.chdir(cwd)
        for line in body.splitlines():
            argv = shlex.split(os.path.expandvars(line), comments=True)
            if argv[:1] == ["iofeed"]:
                assert main(argv[1:]) == 0, line
                ran.append(argv)
    finally:
        os.chdir(before)
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
    return ran


def make_class_folders(root: Path, names: list[str], per_class: int, size: tuple[int, int] = (96, 80)) -> Path:
    """`root/NAME/*.jpg` for each class name (sorted, as folder readers number them): class i is a
    near-flat picture of colour(CODES[i]), textured so crops and resizes keep its mean."""
    assert names == sorted(names) and len(names) <= len(CODES)
    for i, name in enumerate(names):
        folder = root / name
        folder.mkdir(parents=True, exist_ok=True)
        rng = np.random.default_rng(i)
        for n in range(per_class):
            w, h = size[0] + 7 * n, size[1] + 5 * (n % 4)
            pixels = np.clip(np.array(colour(CODES[i])) + rng.integers(-10, 11, (h, w, 3)), 0, 255).astype(np.uint8)
            (folder / f"{name.lower()}.{n}.jpg").write_bytes(jpeg_bytes(Image.fromarray(pixels)))
    return root


def classes_of(images_nhwc_255: np.ndarray, classes: int) -> np.ndarray:
    """The class each image's mean colour is nearest to (images NHWC on the 0-255 scale)."""
    means = np.asarray(images_nhwc_255, np.float64).reshape(len(images_nhwc_255), -1, 3).mean(axis=1)
    palette = np.array([colour(CODES[i]) for i in range(classes)], np.float64)
    return np.abs(means[:, None, :] - palette[None]).sum(axis=2).argmin(axis=1)


def torch_pixels(images: Any) -> np.ndarray:
    """ImageNet-normalised NCHW torch images back to NHWC 0-255."""
    mean = np.array([0.485, 0.456, 0.406]).reshape(1, 3, 1, 1)
    std = np.array([0.229, 0.224, 0.225]).reshape(1, 3, 1, 1)
    return ((images.detach().cpu().double().numpy() * std + mean) * 255).transpose(0, 2, 3, 1)
