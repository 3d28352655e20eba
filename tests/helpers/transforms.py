"""Transforms the tests hand to `iofeed.loader`: importable (the workers unpickle them), random
through each RNG iofeed seeds, and one that fails on some samples."""
from __future__ import annotations

import os
import random
import signal
import sys
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


def rgba(image: np.ndarray) -> np.ndarray:
    """An alpha channel added: 4 channels."""
    return np.concatenate([image, np.full_like(image[..., :1], 255)], axis=2)


def chw(image: np.ndarray) -> np.ndarray:
    """CHW numpy: torchvision's layout where iofeed takes HWC."""
    return np.ascontiguousarray(image.transpose(2, 0, 1))


def grey(image: np.ndarray) -> np.ndarray:
    """One channel, HW."""
    return image.mean(axis=2).astype(np.uint8)


def torch_hwc(image: np.ndarray):
    """A torch tensor left HWC, where torch's convention (and iofeed's reading of a tensor) is CHW."""
    import torch

    return torch.from_numpy(image.copy())


def images_only(images, labels):
    """Forgets the labels: the images alone."""
    return images


def half_images(images, labels):
    """Half the images with all the labels."""
    return images[: len(images) // 2], labels


def returns_none(images, labels):
    """Transforms in place and returns nothing."""
    return None


WAIT_SECONDS = 0.02


def waits(image: np.ndarray) -> np.ndarray:
    """Blocked WAIT_SECONDS (as on a read or a lock), using no CPU: the image unchanged."""
    time.sleep(WAIT_SECONDS)
    return image


def _red(image: np.ndarray) -> bool:
    """Whether `image` is of class 0 (red) in `make_colour_tree`'s colours: the probe's gradient is not."""
    from helpers.images import label_from_pixels

    return label_from_pixels(image) == 0 and float(np.asarray(image, np.float32).reshape(-1, 3).std(axis=0).max()) < 30


def exits_on_red(image: np.ndarray) -> np.ndarray:
    """sys.exit(3) on a red sample (a script's habit in a transform)."""
    if _red(image):
        sys.exit(3)
    return image


def interrupts_on_red(image: np.ndarray) -> np.ndarray:
    """raise KeyboardInterrupt on a red sample (a script's way to stop early, or a library's)."""
    if _red(image):
        raise KeyboardInterrupt("stop here")
    return image


def os_exit_on_red(image: np.ndarray) -> np.ndarray:
    """os._exit(7) on a red sample: the worker ends at once, printing nothing."""
    if _red(image):
        os._exit(7)
    return image


def signal_on_red(image: np.ndarray) -> np.ndarray:
    """The worker killed by SIGTERM on a red sample, as a crash in a library would end it."""
    if _red(image):
        os.kill(os.getpid(), signal.SIGTERM)
    return image


def over_a_limit_on_red(image: np.ndarray) -> np.ndarray:
    """In a worker process: put it under `ulimit -v` (its size + 512 MiB) at the first call, then
    ask for 16 GiB on a red sample (a MemoryError). In the caller (the probe) it does nothing."""
    import multiprocessing
    import resource

    if multiprocessing.parent_process() is None:
        return image
    soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    if soft == resource.RLIM_INFINITY:
        size = int(open("/proc/self/statm").read().split()[0]) * os.sysconf("SC_PAGE_SIZE")
        resource.setrlimit(resource.RLIMIT_AS, (size + (512 << 20), hard))
    if _red(image):
        np.empty(16 << 30, np.uint8)
    return image


def noisy_batch(images, labels, rng: np.random.Generator):
    """A random batch transform: noise from the seeded Generator on every image, per image."""
    images = np.asarray(images)
    noise = rng.integers(-20, 21, images.shape)
    return np.clip(images.astype(np.int16) + noise, 0, 255).astype(np.uint8), labels


def exits(image: np.ndarray) -> np.ndarray:
    """sys.exit(3) on every image: in the probe, it would end the caller's program."""
    sys.exit(3)


def maps_a_library_on_red(image: np.ndarray) -> np.ndarray:
    """On a red sample, in a worker: import a C extension not loaded yet (sqlite's) under an
    address-space limit 1 MiB above the worker's size, as a worker started under a tight `ulimit -v`
    meets its first OpenCV call: "failed to map segment from shared object". The limit is lifted
    again after, so that only the import fails."""
    import importlib
    import multiprocessing
    import resource

    if multiprocessing.parent_process() is None or not _red(image):
        return image
    if "_sqlite3" in sys.modules:  # then its import maps nothing: this test would prove nothing
        raise RuntimeError("_sqlite3 is loaded in the worker already: pick an extension it has not loaded")
    soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    size = int(open("/proc/self/statm").read().split()[0]) * os.sysconf("SC_PAGE_SIZE")
    resource.setrlimit(resource.RLIMIT_AS, (size + (1 << 20), hard))
    try:
        importlib.import_module("_sqlite3")
    finally:
        resource.setrlimit(resource.RLIMIT_AS, (soft, hard))
    return image


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


class Recording:
    """The image as it is, leaving one file in `folder` per call (whichever process calls it): the
    proof that a transform ran, and where."""

    def __init__(self, folder: str) -> None:
        self.folder = folder

    def __call__(self, image: np.ndarray) -> np.ndarray:
        with open(os.path.join(self.folder, f"{os.getpid()}-{time.monotonic_ns()}"), "x"):
            pass
        return image


def fails_on_sample_three(image: np.ndarray) -> np.ndarray:
    """A ValueError for pixel-coded sample 3 (`pixelcode.decode`), any other image as it is."""
    from helpers.pixelcode import decode

    if decode(image)[1] == 3:
        raise ValueError("sample 3 refused")
    return image
