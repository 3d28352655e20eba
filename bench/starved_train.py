"""A deliberately input-bound training run, written the way many users write one: torchvision
ImageFolder + DataLoader with one worker decoding full-size JPEGs, feeding a ResNet on the GPU
(bf16 autocast, channels_last). It is what `iofeed doctor` is run against to show the
data-starved pattern for real:

    iofeed doctor data/c256 --json bench/results/doctor-starved.json -- \
        python bench/starved_train.py data/c256 --seconds 60

Prints images/sec at the end. Runs on the CPU too (slowly), for its test.
"""
from __future__ import annotations

import argparse
import time
from pathlib import Path

import torch
import torchvision
from torchvision import datasets, transforms


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("folder", help="image folder, one subfolder per class (e.g. data/c256/256_ObjectCategories)")
    parser.add_argument("--model", default="resnet18")
    parser.add_argument("--workers", type=int, default=1)
    parser.add_argument("--batch-size", type=int, default=256)
    parser.add_argument("--image-size", type=int, default=224)
    parser.add_argument("--seconds", type=float, default=60.0, help="train this long, then stop")
    parser.add_argument("--max-steps", type=int, default=None)
    args = parser.parse_args()

    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    transform = transforms.Compose([
        transforms.RandomResizedCrop(args.image_size), transforms.RandomHorizontalFlip(), transforms.ToTensor(),
        transforms.Normalize((0.485, 0.456, 0.406), (0.229, 0.224, 0.225)),
    ])
    dataset = datasets.ImageFolder(_class_root(args.folder), transform=transform)
    data = torch.utils.data.DataLoader(dataset, batch_size=args.batch_size, shuffle=True, drop_last=True,
                                       num_workers=args.workers, pin_memory=device.type == "cuda",
                                       multiprocessing_context="forkserver" if args.workers else None)
    model = getattr(torchvision.models, args.model)(weights=None, num_classes=len(dataset.classes))
    model = model.to(device, memory_format=torch.channels_last).train()
    optimiser = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    loss_fn = torch.nn.CrossEntropyLoss()

    images_done, steps, start = 0, 0, time.perf_counter()
    while time.perf_counter() - start < args.seconds and (args.max_steps is None or steps < args.max_steps):
        for images, labels in data:
            images = images.to(device, non_blocking=True).contiguous(memory_format=torch.channels_last)
            labels = labels.to(device, non_blocking=True)
            with torch.autocast(device.type, dtype=torch.bfloat16):
                loss = loss_fn(model(images), labels)
            optimiser.zero_grad(set_to_none=True)
            loss.backward()
            optimiser.step()
            images_done, steps = images_done + len(labels), steps + 1
            if time.perf_counter() - start >= args.seconds or (args.max_steps is not None and steps >= args.max_steps):
                break
    if device.type == "cuda":
        torch.cuda.synchronize()
    elapsed = time.perf_counter() - start
    print(f"{args.model}: {steps} steps, {images_done / elapsed:,.0f} images/sec ({args.workers} loader workers)")


def _class_root(folder: str) -> str:
    """The folder of class folders (Caltech-256's `256_ObjectCategories` inside it, if there)."""
    inner = Path(folder) / "256_ObjectCategories"
    return str(inner if inner.is_dir() else folder)


if __name__ == "__main__":
    main()
