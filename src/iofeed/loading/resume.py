"""The loader's resume state: a small plain dict naming the data, the order and the progress in
samples of the epoch's global order, so that a run continues on another world size, batch size
or engine; every key checked (type, range, agreement with the loader) before any is used."""
from __future__ import annotations

import hashlib
import json
import math
import numbers
import warnings
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from ..errors import OptionError
from ..sources.order import OrderSpec

if TYPE_CHECKING:
    from ..sources.samples import SampleSource

VERSION = 2  # 1: before elastic resume (batches_done, batch_size, rank, world_size; no dataset)
SAME = ("dataset", "samples", "seed", "shuffle", "block_shards")  # must equal the loader's
KEYS = ("version", *SAME, "epoch", "samples_done", "batches_done")
OLD_KEYS = ("epoch", "batches_done", "seed", "samples", "batch_size", "rank", "world_size")


@dataclass(frozen=True)
class Progress:
    """How far an epoch is: `samples_done` samples of its global order, counted by the saving run
    as `batches_done` batches per rank (the resumed batches are numbered on from there)."""

    epoch: int
    samples_done: int
    batches_done: int


def fingerprint(source: SampleSource) -> str:
    """The identity of a split's samples wherever they are read from (a local copy and its URL
    agree): a hash of the class names, labels, file names, offsets and sizes."""
    digest = hashlib.blake2b(digest_size=10)
    digest.update(json.dumps(list(source.classes)).encode())
    names = [bytes(f).rpartition(b"/")[2] for f in source.files]
    digest.update(b"\n".join(names))
    for column in (source.file_id, source.offset, source.size, source.label):
        digest.update(str(column.dtype).encode() + str(column.shape).encode())
        digest.update(np.ascontiguousarray(column).tobytes())
    return digest.hexdigest()


def state(identity: str, order: OrderSpec, progress: Progress) -> dict[str, Any]:
    """The plain dict `Loader.state_dict()` returns: the same on every rank of a run."""
    return {"version": VERSION, "dataset": identity, "samples": order.samples, "seed": order.seed,
            "shuffle": order.shuffle, "block_shards": order.block_shards, "epoch": progress.epoch,
            "samples_done": progress.samples_done, "batches_done": progress.batches_done}


def parse(given: Any, identity: str, order: OrderSpec) -> Progress:
    """The progress in `given` (a `state_dict()`), after checking every key; OptionError naming
    the first bad or disagreeing key. States from before version 2 are read too (see `_old`)."""
    if not isinstance(given, Mapping):
        raise OptionError(f"cannot resume: the state must be the dict state_dict() returned, got "
                          f"{type(given).__name__}")
    if "version" not in given:
        return _old(given, order)
    version = _int(given, "version", VERSION, None)
    if version > VERSION:
        raise OptionError(f"cannot resume: state version={version} comes from a newer iofeed (this one reads up "
                          f"to {VERSION}): upgrade iofeed")
    _keys(given, KEYS)
    mine = state(identity, order, Progress(0, 0, 0))
    for key in SAME:
        if given[key] != mine[key]:
            what = " (another dataset or split)" if key == "dataset" else ""
            raise OptionError(f"cannot resume: state has {key}={given[key]!r}{what}, this loader {mine[key]!r}")
    samples_done = _int(given, "samples_done", 0, order.samples)
    return Progress(_int(given, "epoch", 0, None), samples_done, _int(given, "batches_done", 0, samples_done))


def _old(given: Mapping[str, Any], order: OrderSpec) -> Progress:
    """A state saved before version 2: the order was the same dealing from the start of the epoch,
    so `batches_done` batches of `batch_size` on `world_size` ranks are that many samples of the
    global order, and it continues on any world size. It names no dataset: only the sample count
    and seed can be checked, and a warning says so."""
    _keys(given, OLD_KEYS, optional=("shuffle", "block_shards"))
    for key in ("samples", "seed", "shuffle", "block_shards"):
        if key in given and given[key] != getattr(order, key):
            raise OptionError(f"cannot resume: state has {key}={given[key]!r}, this loader {getattr(order, key)!r}")
    batch_size, world_size = _int(given, "batch_size", 1, None), _int(given, "world_size", 1, order.samples)
    _int(given, "rank", 0, world_size - 1)
    batches = _int(given, "batches_done", 0, math.ceil(math.ceil(order.samples / world_size) / batch_size))
    warnings.warn("resuming from a loader state saved before iofeed's state version 2: it does not name its "
                  "dataset, so only the sample count and seed were checked", UserWarning, stacklevel=3)
    return Progress(_int(given, "epoch", 0, None), min(batches * batch_size * world_size, order.samples), batches)


def _keys(given: Mapping[str, Any], expected: tuple[str, ...], optional: tuple[str, ...] = ()) -> None:
    missing = [k for k in expected if k not in given]
    if missing:
        raise OptionError(f"cannot resume: the state has no {missing[0]!r} (pass the dict state_dict() returned)")
    unknown = [k for k in given if k not in expected and k not in optional]
    if unknown:
        raise OptionError(f"cannot resume: the state has an unknown key {unknown[0]!r} (pass the dict "
                          "state_dict() returned)")


def _int(given: Mapping[str, Any], key: str, low: int, high: int | None) -> int:
    """`given[key]` as an int within [low, high]; OptionError naming the key otherwise."""
    value = given[key]
    if not isinstance(value, bool) and isinstance(value, numbers.Integral):
        number = int(value)
        if low <= number and (high is None or number <= high):
            return number
    bound = f">= {low}" if high is None else f"in {low}..{high}"
    raise OptionError(f"cannot resume: state has {key}={value!r}, expected an int {bound}")


def earliest(states: Iterable[Mapping[str, Any]]) -> Mapping[str, Any]:
    """Of the states saved by the ranks of one run, the one least far on (a run whose ranks are
    not kept in step: resuming from it repeats samples rather than missing any). OptionError
    when they are not of one run (a key of `SAME` or the version differs)."""
    states = list(states)
    if not states or not all(isinstance(s, Mapping) and "epoch" in s for s in states):
        raise OptionError("earliest() needs one or more loader states (the dicts state_dict() returned)")
    for key in ("version", *SAME):
        values = {repr(s.get(key)) for s in states}
        if len(values) > 1:
            raise OptionError(f"the states are not of one run: {key} differs ({', '.join(sorted(values))})")
    return min(states, key=lambda s: tuple(_int(s, k, 0, None) if k in s else 0
                                           for k in ("epoch", "samples_done", "batches_done")))
