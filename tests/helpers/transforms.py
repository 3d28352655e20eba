"""Transforms the tests hand to `iofeed.loader`: importable (the workers unpickle them), random
through each RNG iofeed seeds, and one that fails on some samples."""
from __future__ import annotations

import random
import time

import numpy as np


def jitter(image: np.ndarray) -> np.ndarray:
    """Random brightness (numpy's global RNG) and a random roll (Python's `random`): uint8 HWC."""
    shift = np.random.randint(-40, 41)
    rolled = np.roll(image, random.randint(0, image.shape[1] - 1), axis=1)
    return np.clip(rolled.astype(np.int16) + shift, 0, 255).astype(np.uint8)


def noise_with_rng(image: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """Gaussian noise from the Generator iofeed passes: float32 HWC on the 0-1 scale."""
    return (image / 255.0 + rng.normal(0.0, 0.05, image.shape)).astype(np.float32)


def torch_noise(image: np.ndarray) -> np.ndarray:
    """Noise from torch's global RNG: uint8 HWC."""
    import torch

    noise = torch.randint(-20, 21, image.shape, dtype=torch.int16).numpy()
    return np.clip(image.astype(np.int16) + noise, 0, 255).astype(np.uint8)


def flaky(image: np.ndarray) -> np.ndarray:
    """`jitter`, but a ValueError for about one sample in four (decided by the seeded RNG)."""
    if random.random() < 0.25:
        raise ValueError("unlucky sample")
    return jitter(image)


def downscale(image: np.ndarray) -> np.ndarray:
    """Half the side, float32: another shape and dtype than iofeed's."""
    return image[::2, ::2].astype(np.float32)


def shape_changing(image: np.ndarray) -> np.ndarray:
    """A different shape from one call to the next: a bug iofeed must name."""
    return image[: 1 + random.randint(0, 1) * 2]


def roll_batch(images, labels, rng: np.random.Generator):
    """A random batch transform: the images rolled by a random offset; labels kept."""
    return np.roll(np.asarray(images), int(rng.integers(1, 9)), axis=2), labels


def heavy(image: np.ndarray) -> np.ndarray:
    """`jitter` after 15 ms of CPU work: a transform that holds the loader back."""
    started = time.process_time()
    while time.process_time() - started < 0.015:
        pass
    return jitter(image)


class WaitFor:
    """The identity, once the file `gate` exists: in a loader worker it first touches `entered`, then
    waits for `gate` (a transform that hangs until the test lets it go); in the caller, which
    probes transforms, it waits for nothing."""

    def __init__(self, gate: str, entered: str) -> None:
        self.gate, self.entered = gate, entered

    def __call__(self, image: np.ndarray) -> np.ndarray:
        import multiprocessing
        import os

        if multiprocessing.parent_process() is not None:
            open(self.entered, "a").close()
            while not os.path.exists(self.gate):
                time.sleep(0.01)
        return image
