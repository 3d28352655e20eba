"""What a benchmark run measures: feeds, sizes, durations, outputs — checked before any work."""
from __future__ import annotations

import os
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from ...errors import OptionError, SourceError, require

MODELS = ("resnet50", "resnet18", "none")
TASKS = ("classification", "detection")  # `--task`: which pairs run (each feed belongs to one)
DEVICES = ("cpu", "cuda")
DEFAULT_SOURCE = Path("data/c256")
DEFAULT_COCO = Path("data/coco-standin")  # `--task detection` without a SOURCE: the COCO stand-in
NEEDS = ("psutil", "matplotlib", "torch", "torchvision")  # modules of the `bench` extra every run uses


def require_bench() -> None:
    """A one-line MissingDependencyError naming `pip install 'iofeed[bench]'` when a module every bench
    run uses is missing: checked before any work, not as a ModuleNotFoundError mid-run."""
    for module in NEEDS:
        require(module, "bench")


@dataclass(frozen=True)
class BenchOptions:
    """Settings of one `iofeed bench` run.

    `seconds` is the timed time per feed, split evenly over `rounds` windows; `feeds` None
    means every feed that can run here; `device` None means "cuda" when PyTorch sees a GPU, else
    "cpu"; `model` None means resnet50 on the GPU, none on the CPU.
    """

    source: Path | None = None
    model: str | None = None
    device: str | None = None
    batch_size: int = 64
    image_size: int = 224
    feeds: tuple[str, ...] | None = None
    seconds: float = 10.0
    rounds: int = 3
    warmup: float = 2.0
    workers: int | None = None
    seed: int = 0
    warm_cache: bool = True
    stall_seconds: float = 300.0  # beyond a call's own time, after which a feed counts as hung (and is killed)
    json_path: Path | None = None
    plot_path: Path | None = None
    progress: bool = True
    task: str = "classification"  # "detection": the COCO pairs (boxes; boxes + masks), without a model

    @property
    def window_seconds(self) -> float:
        """Timed seconds of each window (at least; a window ends on a batch boundary)."""
        return self.seconds / self.rounds

    def check(self, known_feeds: tuple[str, ...]) -> None:
        """Raise OptionError or SourceError (one line, naming the value) for bad settings."""
        if self.source is not None and not Path(self.source).exists():
            raise SourceError(f"source not found: {self.source} (pass an image folder or an iofeed dataset)")
        if self.model is not None and self.model not in MODELS:
            raise OptionError(f"--model {self.model!r} is not one of {', '.join(MODELS)}")
        if self.device is not None and self.device not in DEVICES:
            raise OptionError(f"--device {self.device!r} is not one of {', '.join(DEVICES)}")
        for name in self.feeds or ():
            if name not in known_feeds:
                raise OptionError(f"unknown feed {name!r} (choose from {', '.join(known_feeds)})")
        if self.feeds is not None and not self.feeds:
            raise OptionError("--feeds is empty (name at least one feed)")
        if not self.seconds > 0:
            raise OptionError(f"--seconds must be > 0, got {self.seconds}")
        if not self.stall_seconds > 0:
            raise OptionError(f"--stall-seconds must be > 0, got {self.stall_seconds}")
        if not self.warmup >= 0:
            raise OptionError(f"--warmup must be >= 0, got {self.warmup}")
        for flag, value, least in (("--rounds", self.rounds, 1), ("--batch-size", self.batch_size, 1),
                                   ("--image-size", self.image_size, 8)):
            if value < least:
                raise OptionError(f"{flag} must be >= {least}, got {value}")
        if self.task not in TASKS:
            raise OptionError(f"--task {self.task!r} is not one of {', '.join(TASKS)}")
        if self.task == "detection" and self.model not in (None, "none"):
            raise OptionError(f"--task detection measures the loaders alone: --model {self.model} is a classifier "
                              "(leave --model out, or pass --model none)")
        if self.workers is not None and self.workers < 1:
            raise OptionError(f"--workers must be >= 1, got {self.workers}")

    def outputs(self, now: datetime) -> tuple[Path, Path]:
        """(JSON path, PNG path): by default SOURCE.bench/bench-<date>.json beside the data measured
        (data/c256.bench/ without a SOURCE), and the PNG beside the JSON."""
        source = self.source if self.source is not None or self.task == "classification" else DEFAULT_COCO
        json_path = self.json_path or results_dir(source) / f"bench-{now:%Y-%m-%d-%H%M%S}.json"
        return json_path, self.plot_path or json_path.with_suffix(".png")


def results_dir(source: Path | None) -> Path:
    """SOURCE.bench beside the data a bench measures: not the working folder, where results showed up
    in whatever checkout or project the command ran from."""
    source = Path(source if source is not None else DEFAULT_SOURCE)
    source = source if source.name else source.resolve()
    return source.with_name(source.name + ".bench")


def check_writable(*paths: Path) -> None:
    """Make the folders of `paths`; OptionError before any measuring when one cannot be written."""
    for path in paths:
        folder = Path(path).parent
        try:
            folder.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise OptionError(f"cannot make {folder} for the results ({exc.strerror}): pass --json PATH "
                              "(and --plot PATH) in a writable folder") from None
        if not os.access(folder, os.W_OK):
            raise OptionError(f"cannot write the results into {folder}: pass --json PATH (and --plot PATH) in a "
                              "writable folder")


def parse_feeds(text: str | None) -> tuple[str, ...] | None:
    """`"a,b"` → ("a", "b"); None stays None (every feed)."""
    if text is None:
        return None
    return tuple(dict.fromkeys(part.strip() for part in text.split(",") if part.strip()))
