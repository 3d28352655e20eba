"""The engines `iofeed.loader(engine=...)` can choose, with what each can do and needs."""
from __future__ import annotations

from dataclasses import dataclass

from ..runtime.registry import Entry, Registry


@dataclass(frozen=True)
class EngineCaps:
    """What an engine can do and needs; `engine="auto"` decides from these alone."""

    reads_raw: bool  # reads raw-pixel datasets (`preprocess --format raw|mixed`)
    packs: bool  # hands over packed batches (stored pixels + crop boxes) for `gpu_augment`
    needs_gpu: bool  # "auto" picks it only for a CUDA `device` with a GPU present
    requires: str | None = None  # module it needs installed ("auto" looks for it without importing)
    runs_transforms: bool = False  # calls the user's per-sample `transform=` (Python, per sample)
    interpolations: tuple[str, ...] = ("bilinear",)  # the resize filters it does (see `iofeed.Recipe`)
    # whether engine="auto" may choose it (the rule: docs/decisions/0003-engine-auto-never-takes-the-dali-engine.md)
    auto: bool = True
    auto_because: str = ""  # why "auto" takes it where it fits, for `stats.settings["decisions"]`
    targets: bool = False  # moves boxes and masks with the pixels (`Output(target="boxes")` / "masks")


# Why "auto" takes the nvjpeg engine on a GPU (docs/decisions/0073-gpu-decode-engine.md).
NVJPEG_RULE = ("a CUDA device and torchvision's nvJPEG decode are here: its workers only read and pack JPEG bytes "
               "(0.08 ms of CPU per image against 0.66 ms for the workers engine's workers on a 2-core CPU, "
               "2026-11-28), so the cores stop bounding the rate, and each batch is decoded in one call on the GPU; "
               "its pixels differ from libjpeg-turbo's by a few levels (docs/benchmarks.md): pass engine='workers' "
               "for the same pixels on every machine")

# In order of preference for engine="auto" (which never takes `dali`: see `select.AUTO_RULE`).
# An entry's target is called as `target(source, options)`.
ENGINES: Registry[EngineCaps] = Registry("engine", {
    "nvjpeg": Entry("iofeed.engines.nvjpeg.engine:make_nvjpeg_engine",
                    EngineCaps(reads_raw=False, packs=False, needs_gpu=True, requires="torchvision",
                               auto_because=NVJPEG_RULE), extra="nvjpeg"),
    "dali": Entry("iofeed.engines.dali.engine:DaliEngine",
                  EngineCaps(reads_raw=False, packs=False, needs_gpu=True, requires="nvidia.dali",
                             interpolations=("bilinear", "bicubic"), auto=False), extra="dali"),
    "workers": Entry("iofeed.engines.workers.engine:make_worker_engine",
                     EngineCaps(reads_raw=True, packs=True, needs_gpu=False, runs_transforms=True,
                                interpolations=("bilinear", "bicubic", "area"), targets=True)),
})
AUTO = "auto"
