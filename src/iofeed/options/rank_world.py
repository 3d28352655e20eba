"""Rank and world size when `Placement` gives none: an initialised torch.distributed group, else an
initialised jax.distributed, else the launcher's RANK/WORLD_SIZE, else (0, 1); a launcher's
variables that contradict each other refused in one line."""
from __future__ import annotations

import os
import sys

from ..errors import OptionError


def torch_group_started() -> bool:
    """Whether a torch.distributed process group is initialised in this process (torch not imported: no)."""
    dist = sys.modules.get("torch.distributed")
    return dist is not None and dist.is_available() and dist.is_initialized()


def distributed_rank_world() -> tuple[int, int]:
    """(rank, world_size) of an initialised torch.distributed group, else of an initialised
    jax.distributed (process index and count), else RANK/WORLD_SIZE, else (0, 1)."""
    if torch_group_started():
        dist = sys.modules["torch.distributed"]
        return dist.get_rank(), dist.get_world_size()
    jax = sys.modules.get("jax")
    if jax is not None and jax.distributed.is_initialized():
        return jax.process_index(), jax.process_count()
    if "RANK" in os.environ and "WORLD_SIZE" not in os.environ:
        # Taken as (0, 1), every process would read the whole split: duplicates with no word.
        raise OptionError(f"environment variable RANK={os.environ['RANK']!r} is set without WORLD_SIZE: set both "
                          "(torchrun does), unset RANK, or pass placement=iofeed.Placement(rank=..., world_size=...)")
    if "RANK" in os.environ and "WORLD_SIZE" in os.environ:
        rank, world_size = _env_count("RANK", 0), _env_count("WORLD_SIZE", 1)
        if rank >= world_size:
            raise OptionError(f"environment variable RANK={rank} is outside 0..{world_size - 1} (WORLD_SIZE="
                              f"{world_size}): fix the launcher's variables, or pass placement=iofeed.Placement("
                              "rank=..., world_size=...)")
        return rank, world_size
    return 0, 1


def _env_count(name: str, minimum: int) -> int:
    """The integer environment variable `name` (>= `minimum`); OptionError naming it otherwise."""
    text = os.environ[name]
    try:
        value = int(text)
    except ValueError:
        value = None
    if value is None or value < minimum:
        raise OptionError(f"environment variable {name}={text!r} is not an integer >= {minimum}: fix the "
                          "launcher's variables, or pass placement=iofeed.Placement(rank=..., world_size=...)")
    return value
