"""Choosing the engine: a named one checked against the source, or for "auto" the first that fits."""
from __future__ import annotations

import importlib.util

from ..errors import OptionError
from ..options.engine_choices import AUTO, ENGINES, EngineCaps
from ..options.loader_options import LoaderOptions
from ..runtime.gpu.nvml import gpu_present
from ..sources.samples import SampleSource
from .base import Engine

# Why "auto" never takes DALI, even with a GPU and DALI installed (the measurements and what was
# weighed: docs/decisions/0003-engine-auto-never-takes-the-dali-engine.md);
# recorded in `stats.settings["decisions"]` as:
AUTO_RULE = ("on an H100 with 16 cores the workers engine kept ResNet-50 at 98-99% of the ceiling and DALI at "
             "94% (2026-11-24), with the same pixels on every machine (nvJPEG's differ from libjpeg-turbo's by a "
             "few levels); pass engine='dali' to decode on the GPU (worth measuring with few cores per GPU)")


def engine_name(options: LoaderOptions, source: SampleSource) -> str:
    """`options.engine` when it can read `source`; for "auto" the first engine whose capabilities fit."""
    if options.engine != AUTO:
        if source.has_raw() and not ENGINES.caps(options.engine).reads_raw:
            readers = " or ".join(repr(n) for n in ENGINES.having("reads_raw"))
            raise OptionError(f"engine={options.engine!r} decodes JPEGs, and this dataset holds raw pixels: use "
                              f"engine={readers} (raw needs no decoding), or preprocess with --format jpeg for "
                              f"engine={options.engine!r}")
        return options.engine
    for name, entry in ENGINES:
        if entry.caps.auto and fits(entry.caps, options, source):
            return name
    raise OptionError(f"no engine among {', '.join(ENGINES.names())} can read {source.kind} with these options")


def fits(caps: EngineCaps, options: LoaderOptions, source: SampleSource) -> bool:
    """Whether "auto" may pick an engine of `caps` here (nothing is imported)."""
    if source.has_raw() and not caps.reads_raw or options.gpu_augment and not caps.packs:
        return False
    if (options.transform is not None or options.output.tokenizer is not None) and not caps.runs_transforms:
        return False
    if options.moves_targets and not caps.targets:
        return False
    if options.recipe.interpolation not in caps.interpolations:
        return False
    if caps.needs_gpu and not (options.cuda and gpu_present()):
        return False
    return caps.requires is None or _installed(caps.requires)


def choice_notes(options: LoaderOptions, chosen: str, source: SampleSource | None = None) -> list[str]:
    """What `engine="auto"` decided, and why, for `stats.settings["decisions"]`."""
    if options.engine != AUTO:
        return []
    notes = []
    if options.transform is not None:
        passed = [name for name in ENGINES.names() if not ENGINES.caps(name).runs_transforms]
        notes.append(f"engine='auto' chose {chosen!r}: transform= runs only in worker processes"
                     + (f" ({', '.join(passed)} cannot run it)" if passed else ""))
    if ENGINES.caps(chosen).auto_because:
        notes.append(f"engine='auto' chose {chosen!r}: {ENGINES.caps(chosen).auto_because}")
    elif source is not None:
        passed = [name for name, entry in ENGINES if not entry.caps.auto and fits(entry.caps, options, source)]
        if passed:
            notes.append(f"engine='auto' chose {chosen!r} over {', '.join(map(repr, passed))}: {AUTO_RULE}")
    return notes


def make_engine(options: LoaderOptions, source: SampleSource) -> Engine:
    """The chosen engine, built (its module imported only now)."""
    engine: Engine = ENGINES[engine_name(options, source)].load()(source, options)
    return engine


def _installed(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):  # a parent package missing, or a module stubbed out in sys.modules
        return False
