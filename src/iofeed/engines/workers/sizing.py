"""The slots a `workers` engine gets: their layout (decoded images, a transform's output, or packed
pixels for `gpu_augment`) and how many, within the memory budget and the prefetch depth."""
from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from ...augment.transform_checks import TransformedImage
from ...errors import OptionError
from ...options.loader_options import LoaderOptions
from ...runtime.processes import resolve_workers
from ...runtime.system import RankAllowance, usable_cores
from ...sources.samples import SampleSource
from .packing import PackedLayout
from .slots import Layout, SlotLayout, default_memory_budget, default_prefetch
from .target_slots import TargetLayout
from .transformed_targets import TransformedTargetLayout


def engine_layout(source: SampleSource, options: LoaderOptions, output: TransformedImage | None = None,
                  layout_of: Callable[[int], Layout] | None = None) -> tuple[Layout, dict[str, Any]]:
    """The slots' layout (`output`: what the sample transform returns per image, if any; `layout_of`:
    another engine's layout for a number of slots), and the usable cores and memory budget found
    (and why), for `loader.stats`. OptionError when the budget holds fewer than 2 batches."""
    cores = usable_cores()
    resources, batch_size = options.resources, options.batch_size
    max_workers, prefetch = resolve_workers(options.workers), resources.prefetch
    budget = (default_memory_budget() if resources.memory_budget is None
              else RankAllowance(resources.memory_budget, "Resources.memory_budget as given"))

    def layout(slots: int) -> Layout:
        if layout_of is not None:
            return layout_of(slots)
        if options.gpu_augment:
            return PackedLayout.for_source(source, slots, batch_size)
        masks = options.output.target == "masks"
        if options.moves_targets and output is not None:
            assert source.boxes is not None, "handed over with transform= (`loading.build`)"
            capacity = max(1, int(np.diff(source.boxes.offsets).max(initial=0)))
            return TransformedTargetLayout(slots, batch_size, options.resolved_image_size, masks, output.shape,
                                           output.dtype.str, capacity, options.recipe.min_visible)
        if options.moves_targets:
            return TargetLayout(slots, batch_size, options.resolved_image_size, masks)
        if output is None:
            return SlotLayout(slots, batch_size, options.resolved_image_size)
        return SlotLayout(slots, batch_size, options.resolved_image_size, output.shape, output.dtype.str)

    slot_bytes = layout(1).total_bytes
    wanted = (default_prefetch(max_workers) if prefetch is None else prefetch) + 1
    slots = min(wanted, budget.amount // slot_bytes)
    if slots < 2:
        raise OptionError(
            f"Resources.memory_budget={budget.amount:,} bytes ({budget.because}) holds fewer than 2 batches of "
            f"{slot_bytes:,} bytes: raise it, or lower batch_size or image_size"
        )
    found = {"usable_cores": cores.amount, "cores_because": cores.because,
             "memory_budget": budget.amount, "memory_because": budget.because}
    return layout(slots), found
