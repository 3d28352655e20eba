"""Your own callables: `transform=` per sample in the workers and `batch_transform=` per batch in
the adapter — checked before any work, seeded from the batch key, named in errors, timed."""
from __future__ import annotations

import contextlib
import inspect
import pickle
import random
import sys
import time
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np

from ..errors import OptionError, SampleError, WorkerError, is_out_of_memory, out_of_memory
from .batch_key import BatchKey
from .transform_checks import TransformedImage, batch_result_problem, layout_problem, torch_shape

SAMPLE_STREAM, BATCH_STREAM = 1, 2  # seed streams, apart from the crop draws of `BatchKey.rng()`
OUTPUT_DTYPES = (np.dtype(np.uint8), np.dtype(np.float32))
PROBE_TRIES = 8  # seeds a probe tries: a transform that fails on some samples may fail on the first


def transform_name(fn: Any) -> str:
    """`module.function` for a function, the class name for a transform object: for messages."""
    if inspect.isfunction(fn) or inspect.isbuiltin(fn):
        return f"{fn.__module__}.{fn.__qualname__}"
    return type(fn).__qualname__


def check_sample_transform(fn: Any, option: str = "transform") -> None:
    """OptionError unless `fn` (given as `option=`: `transform=`, `Output.tokenizer=`) can travel to
    the worker processes."""
    if fn is None:
        return
    _check_callable(option, fn)
    name = transform_name(fn)
    if getattr(fn, "__name__", "") == "<lambda>":
        raise OptionError(f"{option}=<lambda> cannot reach the worker processes: they receive it pickled, and a "
                          "lambda cannot be pickled; define a function (or a torchvision/albumentations Compose) "
                          "in a module you import")
    module = fn.__module__ if inspect.isfunction(fn) else type(fn).__module__
    if module == "__main__":
        raise OptionError(f"{option}={name} is defined in __main__: worker processes start without your script "
                          "(they never re-run it), so define it in a module you import (e.g. augment.py beside it)")
    try:
        pickle.dumps(fn)
    except Exception as exc:  # noqa: BLE001 - any pickling failure is the same refusal
        detail = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise OptionError(f"{option}={name} cannot be pickled for the worker processes ({detail}): define it at "
                          "the top level of a module you import") from None


def check_batch_transform(fn: Any) -> None:
    """OptionError unless `fn` (given as `batch_transform=`) is callable (it runs in this process)."""
    if fn is not None:
        _check_callable("batch_transform", fn)


def _check_callable(option: str, fn: Any) -> None:
    if not callable(fn):
        shown = (repr(fn).splitlines() or [""])[0][:80]
        raise OptionError(f"{option}={shown} is not callable: pass a function or a transform object (or None)")


def takes_rng(fn: Any) -> bool:
    """Whether `fn` declares an `rng` parameter (it then gets a seeded numpy Generator)."""
    return takes(fn, "rng")


# How a library's transform objects are called and seeded, by top-level module; others: fn(image).
def _albumentations(fn: Any, image: np.ndarray, seed: int) -> Any:
    if hasattr(fn, "set_random_seed"):  # its own generators, not the global ones
        fn.set_random_seed(seed)
    return fn(image=image)["image"]


CALL_STYLES: dict[str, Callable[[Any, np.ndarray, int], Any]] = {"albumentations": _albumentations}


def _seeds(key: BatchKey, *tail: int) -> tuple[np.random.SeedSequence, int]:
    sequence = np.random.SeedSequence((key.seed, key.epoch, key.rank, key.batch_no, *tail))
    words = sequence.generate_state(2, np.uint32)
    return sequence, int(words[0]) << 32 | int(words[1])


def seed_globals(seed: int) -> None:
    """Seed Python's `random`, numpy's global RNG and (if loaded) torch's CPU RNG with `seed`."""
    random.seed(seed)
    np.random.seed(seed & 0xFFFFFFFF)
    torch = sys.modules.get("torch")
    if torch is not None:
        torch.default_generator.manual_seed(seed)


@contextlib.contextmanager
def preserved_globals(cuda: Any = None) -> Iterator[None]:
    """Restore Python's, numpy's and torch's global RNG states (and `cuda`'s, a torch.device) on
    exit: seeding for a probe or a batch transform leaves the caller's own random streams alone."""
    python, legacy = random.getstate(), np.random.get_state()
    torch = sys.modules.get("torch")
    forked = (torch.random.fork_rng(devices=[cuda] if cuda is not None else [], device_type="cuda")
              if torch is not None else contextlib.nullcontext())
    try:
        with forked:
            yield
    finally:
        random.setstate(python)
        np.random.set_state(legacy)


def as_hwc(value: Any) -> np.ndarray:
    """A transform's output as an HWC numpy array: a torch tensor (torchvision's `Image` included)
    is CHW, torchvision's convention."""
    torch = sys.modules.get("torch")
    if torch is not None and isinstance(value, torch.Tensor):
        value = value.detach().cpu().as_subclass(torch.Tensor)
        pixels: np.ndarray = (value.permute(1, 2, 0) if value.dim() == 3 else value).numpy()
        return pixels
    return np.asarray(value)


class SampleTransform:
    """`transform=` in a worker: seeded per sample, called, checked, timed: `wall_seconds` (what it
    holds the worker up: waiting on I/O, a lock or a sleep included) and `cpu_seconds` (process CPU
    time, which a busy machine does not inflate). The clocks are arguments for tests."""

    def __init__(self, fn: Any, output: TransformedImage, clock: Callable[[], float] = time.perf_counter,
                 cpu_clock: Callable[[], float] = time.process_time) -> None:
        self.fn, self.output, self.name = fn, output, transform_name(fn)
        self._rng = takes_rng(fn)
        self._call = CALL_STYLES.get(type(fn).__module__.split(".")[0])
        self._clock, self._cpu_clock = clock, cpu_clock
        self.cpu_seconds = self.wall_seconds = 0.0
        self.raw_shape: tuple[int, ...] | None = None  # the last output's torch shape (CHW), if a tensor

    def __call__(self, image: np.ndarray, key: BatchKey, position: int, path: str) -> np.ndarray:
        """`image` (HWC uint8) transformed with the seeds of (key, position). SampleError when the
        transform raises (skipped or raised per on_error); WorkerError for an output of another shape."""
        out = self.apply(image, key, position, path)
        if out.shape != self.output.shape or out.dtype != self.output.dtype:
            raise WorkerError(f"{path}: transform {self.name} returned {out.shape} {out.dtype}, the first image gave "
                              f"{self.output.shape} {self.output.dtype}: return one fixed shape and dtype")
        return out

    def apply(self, image: np.ndarray, key: BatchKey, position: int, path: str = "") -> np.ndarray:
        """The output as an HWC array, unchecked; SampleError naming the transform when it raises.
        WorkerError when it runs out of memory (the limit, not the sample: skipping would lose
        healthy samples) or calls sys.exit (which would end the worker without a word)."""
        with self.running(path):
            sequence, seed = self.seeded(key, position)
            if self._call is not None:
                out = self._call(self.fn, image, seed & 0xFFFFFFFF)
            elif self._rng:
                out = self.fn(image, rng=np.random.default_rng(sequence))
            else:
                out = self.fn(image)
            self.raw_shape = torch_shape(out)
            return as_hwc(out)

    @staticmethod
    def seeded(key: BatchKey, position: int) -> tuple[np.random.SeedSequence, int]:
        """Sample `position` of batch `key`'s seeds, the global RNGs seeded with them."""
        sequence, seed = _seeds(key, position, SAMPLE_STREAM)
        seed_globals(seed)
        return sequence, seed

    @contextlib.contextmanager
    def running(self, path: str = "") -> Iterator[None]:
        """Times the transform's call inside, and turns what it raises into one line naming it
        (see `apply`)."""
        started, cpu = self._clock(), self._cpu_clock()
        try:
            yield
        except SystemExit as exc:
            where = f"{path}: " if path else ""
            raise WorkerError(f"{where}transform {self.name} called sys.exit({exc.code!r}): a transform must return "
                              "the image or raise an exception") from None
        except (SampleError, WorkerError, OptionError):
            raise  # already one line naming the transform (a target transform's checks)
        except Exception as exc:  # noqa: BLE001 - the user's code: skipped or raised per on_error
            if is_out_of_memory(exc):
                on = f" on sample {path}" if path else ""
                raise WorkerError(out_of_memory(f"in transform {self.name}{on}")) from None
            detail = str(exc).splitlines()[0] if str(exc) else "no message"
            raise SampleError(f"transform {self.name} raised {type(exc).__name__} ({detail})") from None
        finally:
            self.wall_seconds += self._clock() - started
            self.cpu_seconds += self._cpu_clock() - cpu


def probe_image(image_size: int) -> np.ndarray:
    """An image_size² RGB uint8 smooth gradient: what a probe hands a transform."""
    side = np.arange(image_size, dtype=np.uint16) * 255 // max(image_size - 1, 1)
    return np.stack(np.broadcast_arrays(side[:, None], side[None, :], side[::-1, None]), axis=2).astype(np.uint8)


def probe_output(fn: Any, image_size: int) -> TransformedImage:
    """The shape and dtype `fn` returns for an image_size² RGB uint8 image (`probe_image`), run
    here with the global RNGs restored after; OptionError when it fails with each of PROBE_TRIES
    seeds or returns another dtype."""
    image = probe_image(image_size)
    runner = SampleTransform(fn, TransformedImage((), np.dtype(np.uint8)))
    what = f"a {image_size}x{image_size}x3 uint8 image"
    with preserved_globals():
        for position in range(PROBE_TRIES):
            try:
                out = runner.apply(image, BatchKey(0, 0, 0, 0), position)
                break
            except (SampleError, WorkerError) as exc:
                failure = exc
        else:
            raise OptionError(f"transform={runner.name} failed on {what}: {failure}") from None
    return checked_output(runner, out, what)


def checked_output(runner: SampleTransform, out: np.ndarray, what: str) -> TransformedImage:
    """The probed output's shape and dtype; OptionError naming the transform for another dtype or
    layout than HWC uint8/float32 with 3 channels."""
    if out.dtype not in OUTPUT_DTYPES:
        raise OptionError(f"transform={runner.name} returned {out.shape} {out.dtype} for {what}: return HWC uint8 "
                          "or float32 (a torch tensor: CHW)")
    problem = layout_problem(runner.raw_shape, out.shape)
    if problem is not None:
        shown, fix = problem
        raise OptionError(f"transform={runner.name} returned {shown} for {what}: {fix}")
    return TransformedImage(tuple(out.shape), out.dtype)


def batch_seed(key: BatchKey | None) -> np.ndarray:
    """Two int64 words seeding batch `key`'s transform: a stateless-RNG seed (e.g. TensorFlow's)."""
    sequence, _ = _seeds(key or BatchKey(0, 0, 0, 0), BATCH_STREAM)
    return sequence.generate_state(2, np.uint64).astype(np.int64)


def takes(fn: Any, parameter: str) -> bool:
    """Whether `fn` declares `parameter`."""
    try:
        return parameter in inspect.signature(fn).parameters
    except (TypeError, ValueError):  # builtins without a signature
        return False


@contextlib.contextmanager
def one_torch_thread() -> Iterator[None]:
    """torch on one intra-op thread inside (when loaded), the caller's count restored after."""
    torch = sys.modules.get("torch")
    threads = torch.get_num_threads() if torch is not None else 1
    if torch is None or threads == 1:
        yield
        return
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(threads)


class BatchTransform:
    """`batch_transform=` in the consumer: seeded per batch from its key (torch's RNG on `cuda`,
    a torch.device, included), the caller's own random streams restored after. On the CPU it
    runs on one torch thread: torch's intra-op threads spin between kernels and take the
    workers' cores (measured: docs/decisions/0069-transforms-runs-a-cpu-batch-transform-on.md)."""

    def __init__(self, fn: Any, cuda: Any = None) -> None:
        self.fn, self.cuda, self.name = fn, cuda, transform_name(fn)
        self._rng = takes_rng(fn)

    def __call__(self, images: Any, labels: Any, key: BatchKey | None) -> tuple[Any, Any]:
        """`fn(images, labels)` seeded from `key`; OptionError naming it unless it returns
        (images, labels) of the batch's length."""
        sequence, seed = _seeds(key or BatchKey(0, 0, 0, 0), BATCH_STREAM)
        with preserved_globals(self.cuda), (one_torch_thread() if self.cuda is None else contextlib.nullcontext()):
            seed_globals(seed)
            if self.cuda is not None:
                sys.modules["torch"].cuda.default_generators[self.cuda.index or 0].manual_seed(seed)
            if self._rng:
                out = self.fn(images, labels, rng=np.random.default_rng(sequence))
            else:
                out = self.fn(images, labels)
        problem = batch_result_problem(out, len(images))
        if problem:
            raise OptionError(f"batch_transform={self.name} returned {problem}")
        return out[0], out[1]
