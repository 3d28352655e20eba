"""Full batches despite skipped samples: a skipped sample's place goes to a spare sample, so that
every rank delivers `len()` batches of the same size (DDP collectives stay in step, JAX shapes
stay equal). Written once for every engine."""
from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

import numpy as np

REFILL_TRIES = 8  # spare samples a batch may try beyond one per sample (spares can be unreadable too)


@dataclass
class Filled:
    """What went into a batch: sample indices in order, the skipped ones with their reasons, and
    how many spares took their places."""

    delivered: list[int] = field(default_factory=list)
    skipped: list[tuple[int, str]] = field(default_factory=list)
    refilled: int = 0
    exhausted: bool = False  # a skipped sample's place stayed empty: the spares ran out


def spares(batches: list[np.ndarray], batch_no: int, following: list[np.ndarray] | None) -> np.ndarray:
    """The samples that may take skipped samples' places in `batches[batch_no]`, in the order tried:
    the pass's later batches', then the next epoch's first ones. On the same layout a resumed pass
    has the same later batches and the same next epoch, so a refill is the same after a resume."""
    want, parts = len(batches[batch_no]) + REFILL_TRIES, []
    for part in itertools.chain(batches[batch_no + 1:], following or ()):
        parts.append(part[:want])
        want -= len(parts[-1])
        if want <= 0:
            break
    return np.concatenate(parts).astype(np.int64) if parts else np.empty(0, np.int64)


def no_spares(batches: list[np.ndarray], batch_no: int, following: list[np.ndarray] | None) -> np.ndarray:
    """None: the order deals each sample once (`Order(pad="none")`), and a spare in a skipped
    sample's place would be scored twice (once there, once in its own batch). Its batch stays short."""
    return np.empty(0, np.int64)


def spares_of(deals_once: bool) -> Callable[[list[np.ndarray], int, list[np.ndarray] | None], np.ndarray]:
    """The spares rule of an order: `spares`, or `no_spares` when it deals each sample once."""
    return no_spares if deals_once else spares


def fill(planned: np.ndarray, spare: np.ndarray, load: Callable[[int, int, int, bool], str | None],
         part_of: Callable[[int], int] | None = None) -> Filled:
    """Load `planned` in order with `load(k, position, index, is_spare)`: put sample `index` at place
    `k`, returning None, or the reason it cannot be read (or
    raising to end the batch: on_error="raise", a pass abandoned). Each skipped sample's place
    goes to the next spare that loads; a spare that does not is passed over (its own batch counts it).
    `position` numbers planned samples 0.. and spares on after them (their transform seeds differ
    from the planned sample's: a transform that failed on a draw would fail again on the same one).
    `part_of` (a mixture's source of a sample): spares of the skipped sample's own source are tried
    first, so each source keeps its exact share of the epoch; another source's only when none of
    its own is among the spares (or loads)."""
    filled, pool = Filled(), list(enumerate(spare.tolist(), start=len(planned)))
    for position, index in enumerate(planned):
        reason = load(len(filled.delivered), position, int(index), False)
        if reason is None:
            filled.delivered.append(int(index))
            continue
        filled.skipped.append((int(index), reason))
        for number, candidate in _tries(pool, part_of, int(index)):
            if load(len(filled.delivered), number, candidate, True) is None:
                filled.delivered.append(candidate)
                filled.refilled += 1
                break
        else:
            filled.exhausted = True
    return filled


def _tries(pool: list[tuple[int, int]], part_of: Callable[[int], int] | None,
           index: int) -> Iterator[tuple[int, int]]:
    """The spares of `pool` (number, sample) to try for skipped sample `index`, each taken out of the
    pool as it is tried: in order, those of `index`'s own part first."""
    order = list(pool)
    if part_of is not None:
        own = part_of(index)
        order.sort(key=lambda spare: part_of(spare[1]) != own)  # stable: in order within each group
    for tried in order:
        pool.remove(tried)
        yield tried
