"""An evaluation split whose accuracy is known exactly: pixel-coded samples (`pixelcode.py`) and a
stand-in model that reads each image's class from its pixels and gets every fifth sample number
wrong. A lost, duplicated or padded row changes the figure, so a metric scored over several
ranks shows whether it counted each sample exactly once."""
from __future__ import annotations

from pathlib import Path
from typing import Any

from helpers.adversarial import build
from helpers.pixelcode import Source, decode

# uint8 NCHW pixels as stored (no crop, no normalisation), which `predict` decodes
EVAL_RECIPE: dict[str, Any] = {"train": False, "crop_fraction": 1.0, "normalize": False}


def coded_split(root: Path, samples: int) -> tuple[Path, Source, list[int]]:
    """A dataset of `samples` pixel-coded images of 3 classes, all in its val split; the source;
    and the class index of each label code (what `predict` needs)."""
    from iofeed.format.manifest import Manifest
    from iofeed.prepare.run import preprocess

    source = build("folder", "clean", root, count=samples)
    out = root / "coded.iof"
    preprocess(source.spec, out, val_fraction=1.0, shard_bytes=1 << 16, progress=False, workers=1)
    classes = Manifest.read(out).classes
    return out, source, [classes.index(name) for name in source.names]


def exact_correct(source: Source) -> int:
    """How many samples of the split `predict` gets right: all but every fifth sample number."""
    return sum(1 for sample in source.kept() if sample % 5)


def predict(images: Any, code_to_class: list[int]) -> tuple[Any, Any]:
    """(predicted classes, sample numbers) of a uint8 NCHW torch batch: the class its pixels say,
    except for sample numbers divisible by 5, predicted as the next class."""
    import torch

    decoded = [decode(image) for image in images.permute(0, 2, 3, 1).cpu().numpy()]
    samples = torch.tensor([sample for _, sample in decoded], dtype=torch.int64)
    classes = torch.tensor([code_to_class[code] for code, _ in decoded], dtype=torch.int64)
    return torch.where(samples % 5 == 0, (classes + 1) % len(set(code_to_class)), classes), samples
