"""Accuracy parity of `Recipe(fast_decode=True)` (libjpeg-turbo's fast IDCT and upsampling) against
the exact decode, on real photos: the same small CNN, trained the same way, three seeds each.

The photos are those scikit-image ships (no download): each class is one photo; samples are
random patches of it, JPEG quality 90, train patches from the left 70% of the photo and
validation patches from the right 30% (unseen pixels). Usage (a few minutes on 2 cores):

    PYTHONPATH=src .venv/bin/python bench/fast_decode_parity.py [--epochs 4] [--size 64] [--seeds 3] [--out DIR]

Prints per-seed validation accuracy, the mean and standard error per decode, and whether the
two means agree within two standard errors (of their difference). Also the pixel difference the
fast decode makes on the validation images (mean and max levels).
"""
from __future__ import annotations

import argparse
import io
import math
import tempfile
import time
from pathlib import Path

import numpy as np
from PIL import Image

PHOTOS = ("astronaut.png", "chelsea.png", "coffee.png", "rocket.jpg", "motorcycle_left.png", "hubble_deep_field.jpg",
          "ihc.png", "retina.jpg", "brick.png", "grass.png", "gravel.png", "camera.png")  # files of skimage/data
TRAIN_PER_CLASS, VAL_PER_CLASS = 60, 30


def photos() -> dict[str, np.ndarray]:
    """scikit-image's bundled photos (read from its package folder: nothing is fetched) as RGB uint8."""
    import importlib.util

    spec = importlib.util.find_spec("skimage")
    if spec is None or spec.origin is None:
        raise SystemExit("fast_decode_parity: needs scikit-image (its bundled photos): pip install scikit-image")
    folder = Path(spec.origin).parent / "data"
    return {name.split(".")[0]: np.asarray(Image.open(folder / name).convert("RGB")) for name in PHOTOS}


def write_trees(root: Path, side: int, seed: int = 0) -> None:
    """root/train and root/val, folders of class folders: patches (random size 25-60% of the
    photo's shorter side, resized to `side`) as JPEG q90; val from the right 30% of each photo."""
    rng = np.random.default_rng(seed)
    for c, (name, pixels) in enumerate(photos().items()):
        height, width = pixels.shape[:2]
        split = int(width * 0.7)
        parts = (("train", TRAIN_PER_CLASS, (0, split)), ("val", VAL_PER_CLASS, (split, width)))
        for part, count, (x_lo, x_hi) in parts:
            folder = root / part / f"{c:03d}.{name}"
            folder.mkdir(parents=True)
            for i in range(count):
                side = int(min(height, x_hi - x_lo) * rng.uniform(0.25, 0.6))
                x = int(rng.integers(x_lo, x_hi - side + 1))
                y = int(rng.integers(0, height - side + 1))
                patch = Image.fromarray(pixels[y:y + side, x:x + side]).resize((side, side), Image.Resampling.BICUBIC)
                buffer = io.BytesIO()
                patch.save(buffer, "JPEG", quality=90)
                (folder / f"{part}_{i:03d}.jpg").write_bytes(buffer.getvalue())


def make_datasets(work: Path, size: int) -> tuple[Path, Path]:
    """The train and val trees, each preprocessed by iofeed into a dataset of one split ("train").
    Patches are 5/4 of the model's side: every crop then decodes at full scale, where the fast
    IDCT and upsampling act (a DCT-scaled decode takes neither)."""
    from iofeed.prepare.run import preprocess

    write_trees(work / "photos", size * 5 // 4)
    made = []
    for part in ("train", "val"):
        made.append(work / f"{part}.iof")
        preprocess(work / "photos" / part, made[-1], val_per_class=0, progress=False, workers=2)
    return made[0], made[1]


def model(classes: int):  # noqa: ANN201 - torch is imported here only
    import torch.nn as nn

    def block(i: int, o: int) -> nn.Sequential:
        return nn.Sequential(nn.Conv2d(i, o, 3, padding=1, bias=False), nn.BatchNorm2d(o), nn.ReLU(), nn.MaxPool2d(2))

    return nn.Sequential(block(3, 16), block(16, 32), block(32, 64), block(64, 64), nn.AdaptiveAvgPool2d(1),
                         nn.Flatten(), nn.Linear(64, classes))


def train_once(datasets: tuple[Path, Path], fast: bool, seed: int, epochs: int, size: int) -> float:
    """Validation accuracy after `epochs` of SGD with the decode `fast` names."""
    import torch

    import iofeed

    torch.manual_seed(seed)
    recipe = iofeed.Recipe(fast_decode=fast, scale=(0.25, 1.0))
    common = dict(batch_size=32, image_size=size, framework="torch", workers=1, seed=seed)
    train = iofeed.loader(datasets[0], split="train", augment=recipe, **common)
    val = iofeed.loader(datasets[1], split="train", augment=iofeed.Recipe(fast_decode=fast, train=False),
                        drop_last=False, **common)
    net = model(len(PHOTOS))
    steps = epochs * len(train)
    optimiser = torch.optim.SGD(net.parameters(), lr=0.05, momentum=0.9, weight_decay=5e-4)
    schedule = torch.optim.lr_scheduler.OneCycleLR(optimiser, max_lr=0.1, total_steps=steps)
    try:
        for epoch in range(epochs):
            train.set_epoch(epoch)
            net.train()
            for images, labels in train:
                optimiser.zero_grad()
                torch.nn.functional.cross_entropy(net(images), labels).backward()
                optimiser.step()
                schedule.step()
        net.eval()
        right = total = 0
        with torch.no_grad():
            for images, labels in val:
                right += int((net(images).argmax(1) == labels).sum())
                total += len(labels)
    finally:
        train.close()
        val.close()
    return right / total


def pixel_difference(dataset: Path, size: int) -> tuple[float, int]:
    """Mean and max |fast - exact| over the validation images, centre-cropped to `size`."""
    import iofeed

    batches = []
    for fast in (False, True):
        with iofeed.loader(dataset, split="train", drop_last=False, batch_size=64, image_size=size, framework="numpy",
                           workers=1,
                           augment=iofeed.Recipe(fast_decode=fast, train=False, normalize=False)) as ld:
            batches.append(np.concatenate([images for images, _ in ld]).astype(np.int16))
    difference = np.abs(batches[0] - batches[1])
    return float(difference.mean()), int(difference.max())


def main() -> None:
    import torch

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--epochs", type=int, default=4)
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--size", type=int, default=64)
    parser.add_argument("--out", type=Path, default=None, help="work folder (default: a temporary one)")
    args = parser.parse_args()
    torch.set_num_threads(2)
    with tempfile.TemporaryDirectory(prefix="iofeed-parity-") as temporary:
        work = args.out or Path(temporary)
        datasets = make_datasets(work, args.size)
        mean, largest = pixel_difference(datasets[1], args.size)
        print(f"pixels, fast vs exact decode (val, centre crop {args.size} px): mean {mean:.3f} levels, max {largest}")
        results: dict[bool, list[float]] = {False: [], True: []}
        for seed in range(args.seeds):
            for fast in (False, True):
                began = time.perf_counter()
                accuracy = train_once(datasets, fast, seed, args.epochs, args.size)
                results[fast].append(accuracy)
                print(f"seed {seed} fast_decode={fast!s:5}: val accuracy {accuracy:.4f} "
                      f"({time.perf_counter() - began:.0f} s)", flush=True)
    summary = {}
    for fast, values in results.items():
        values_ = np.asarray(values)
        error = values_.std(ddof=1) / math.sqrt(len(values_)) if len(values_) > 1 else float("nan")
        summary[fast] = (values_.mean(), error)
        print(f"fast_decode={fast!s:5}: mean {values_.mean():.4f}, standard error {error:.4f}")
    gap = abs(summary[True][0] - summary[False][0])
    bound = 2 * math.hypot(summary[True][1], summary[False][1])
    print(f"difference {gap:.4f}, two standard errors of the difference {bound:.4f}: "
          f"{'parity holds' if gap <= bound else 'parity NOT shown'}")


if __name__ == "__main__":
    main()
