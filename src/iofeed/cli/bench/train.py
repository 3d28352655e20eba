"""The training step a feed drives when a model is asked for: torchvision ResNet, bf16 autocast,
channels_last, SGD. Runs on a GPU in the benchmark, and on the CPU in tests."""
from __future__ import annotations

from collections.abc import Callable
from typing import Any

Step = Callable[[Any, Any], None]


def make_step(model: str, classes: int, device: str) -> tuple[Step, Callable[[], None]]:
    """(step(images, labels), sync()) for torchvision `model` (weights=None) on `device`.

    `step` runs forward, backward and an SGD update without waiting for the device;
    `sync` waits for every queued step (call it before reading a clock).
    """
    import torch
    import torchvision

    target = torch.device(device)
    net = getattr(torchvision.models, model)(weights=None, num_classes=classes)
    net = net.to(target, memory_format=torch.channels_last).train()
    optimiser = torch.optim.SGD(net.parameters(), lr=0.01, momentum=0.9)
    loss_fn = torch.nn.CrossEntropyLoss()

    def step(images: Any, labels: Any) -> None:
        images = images.to(target, non_blocking=True).contiguous(memory_format=torch.channels_last)
        labels = labels.to(target, non_blocking=True)
        with torch.autocast(target.type, dtype=torch.bfloat16):
            loss = loss_fn(net(images), labels)
        optimiser.zero_grad(set_to_none=True)
        loss.backward()
        optimiser.step()

    def sync() -> None:
        if target.type == "cuda":
            torch.cuda.synchronize(target)

    return step, sync
