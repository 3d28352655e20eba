"""A `Mix` opened for the loader: its sources' splits as one concatenated sample table (file ids
offset, classes merged), its order, targets, per-source accounting and its identity in states."""
from __future__ import annotations

import dataclasses
import hashlib
import json
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, cast

import numpy as np

from ..engines.base import Batch
from ..engines.skips import EpochSkips, check_scanned
from ..errors import DatasetError, OptionError, SampleError
from ..options.loader_options import LoaderOptions
from ..sources.dealing import EpochBatches
from ..sources.folder_scan import reason_kind
from ..sources.mix import Mix, MixPlan, shares
from ..sources.mix_order import MixEpoch
from ..sources.mix_remote import MixedRemote
from ..sources.order import SHUFFLES, OrderSpec
from ..sources.sample_targets import SampleTargets, open_targets
from ..sources.samples import SampleSource, check_unchanged, open_source
from .resume import fingerprint

INTERLEAVE = "blocks"  # the arrangement of the sources in a state: `mix_order.MixPlan`'s, drawn block-wise


@dataclass
class MixedSource(SampleSource):
    """The concatenated table; `parts` the sources as opened, less their sample arrays (workers get
    this object), so that each shard is checked against its own dataset."""

    parts: list[SampleSource] = field(default_factory=list)
    file_part: np.ndarray = field(default_factory=lambda: np.empty(0, np.int32))  # each file's part

    def check_unchanged(self, file_id: int) -> None:
        """DatasetError when the dataset holding `file_id` was replaced since it was opened."""
        check_unchanged(self.parts[int(self.file_part[file_id])])

    def part_of(self, index: int) -> int:
        """The source (its position in the Mix) holding sample `index`: a skipped sample's place
        goes to a spare of its own source first (`refill.fill`), keeping the shares exact."""
        return int(self.file_part[self.file_id[index]])


def merge_classes(names: list[str], lists: list[list[str]], how: str) -> tuple[list[str], list[np.ndarray]]:
    """The mixture's class list and, per source, its class index -> the mixture's. "name" merges
    equal names (first seen first) and refuses two names that differ only in case or spaces (the
    same class spelled twice, or two classes a merge would confuse); "offset" keeps every source's
    classes, named "SOURCE:CLASS", one source after another."""
    if how == "offset":
        merged = [f"{name}:{c}" for name, classes in zip(names, lists) for c in classes]
        sizes = np.cumsum([0, *map(len, lists)])
        return merged, [np.arange(len(c), dtype=np.int64) + sizes[k] for k, c in enumerate(lists)]
    index: dict[str, int] = {}
    spelled: dict[str, tuple[str, str]] = {}  # folded name -> (name, source)
    remaps = []
    for name, classes in zip(names, lists):
        for c in classes:
            folded = " ".join(c.split()).casefold()
            first = spelled.setdefault(folded, (c, name))
            if first[0] != c:
                raise OptionError(f"Mix: class {c!r} of {name} and {first[0]!r} of {first[1]} differ only in case "
                                  "or spaces: rename one, or pass classes='offset' to keep the sources' classes apart")
            index.setdefault(c, len(index))
        remaps.append(np.array([index[c] for c in classes], dtype=np.int64))
    return list(index), remaps


def concatenate(names: list[str], parts: list[SampleSource], how: str) -> MixedSource:
    """The parts as one table: file ids offset, labels through the merged class list (-1 stays)."""
    classes, remaps = merge_classes(names, [p.classes for p in parts], how)
    files = np.cumsum([0, *(len(p.files) for p in parts)])
    labels = [np.where(p.label >= 0, remap[np.maximum(p.label, 0)] if len(remap) else -1, p.label)
              for p, remap in zip(parts, remaps)]

    def cat(column: str, dtype: Any) -> np.ndarray:
        return np.concatenate([getattr(p, column) for p in parts]).astype(dtype)

    mixed = MixedSource(
        files=np.concatenate([p.files for p in parts]),
        file_id=np.concatenate([p.file_id + files[k] for k, p in enumerate(parts)]).astype(np.int32),
        offset=cat("offset", np.int64), size=cat("size", np.int64), label=np.concatenate(labels).astype(np.int64),
        classes=classes, kind="dataset" if all(p.kind == "dataset" for p in parts) else "folder",
        encoding=cat("encoding", np.uint8), width=cat("width", np.int32), height=cat("height", np.int32),
        rejected=sum((p.rejected for p in parts), Counter()), validated=all(p.validated for p in parts),
        parts=[_shell(p) for p in parts],
        file_part=np.repeat(np.arange(len(parts)), [len(p.files) for p in parts]).astype(np.int32))
    if any(p.remote is not None for p in parts):  # read through the node cache, local files in place
        mixed.remote = MixedRemote(  # type: ignore[assignment]  # typed RemoteShards: MixedRemote duck-types it
            [p.remote for p in parts], mixed.parts, mixed.files, mixed.file_part, files[:-1])
    return mixed


def _shell(part: SampleSource) -> SampleSource:
    """`part` without its sample arrays: what `check_unchanged` reads."""
    empty = np.empty(0, np.int64)
    return dataclasses.replace(part, file_id=empty, offset=empty, size=empty, label=empty, encoding=empty,
                               width=empty, height=empty, files=part.files[:0])


class Mixture:
    """A `Mix` opened for one split: the table (`data`), the order, targets, stats and state."""

    def __init__(self, mix: Mix, split: str, options: LoaderOptions) -> None:
        self.mix, self.split, self.names = mix, split, mix.names
        parts = [open_source(name, split, cache_dir=options.cache.dir, cache_limit=options.cache.limit)
                 for name in self.names]
        folders = [name for name, part in zip(self.names, parts) if part.kind == "folder"]
        if split != "train" and folders:  # a folder has no splits: its training images would pass for val
            raise OptionError(f"Mix: {folders[0]} is an image folder, which has no {split!r} split: leave it out of "
                              f"the {split} mixture")
        empty = [name for name, part in zip(self.names, parts) if not len(part)]
        if empty:
            raise DatasetError(f"Mix: {empty[0]} has no samples in split {split!r}: leave it out of the mixture")
        self.parts = parts
        self.data = concatenate(self.names, parts, mix.classes)
        self._described: dict[str, Any] = {}
        self.sizes = [len(p) for p in parts]
        self.bases = np.cumsum([0, *self.sizes])
        total = mix.epoch_samples or sum(self.sizes)
        block = [options.shuffle_for(streamed=p.remote is not None) == "block" for p in parts]
        self.plan = MixPlan(tuple(self.sizes), tuple(shares(list(mix.weights.values()), total)),
                            tuple(p.file_id if b else None for p, b in zip(parts, block)), options.order.block_shards)
        unread = [name for name, count in zip(self.names, self.plan.counts) if not count]
        if split == "train" and unread:  # a source listed but never read is a mistake, not a choice
            raise OptionError(f"Mix: the weight of {unread[0]} gives it none of an epoch's {total} samples: raise "
                              "its weight or epoch_samples, or leave it out")
        for name, part in zip(self.names, parts):  # a folder's scan rejections, held to the bound per source
            check_scanned(part.rejected, len(part), options.skips.max_skipped, name)
        self.skips: list[EpochSkips] = []

    def source_of(self, indices: np.ndarray) -> np.ndarray:
        """The source (its position in the Mix) of each sample index."""
        return np.searchsorted(self.bases, indices, side="right") - 1

    def order(self, options: LoaderOptions) -> OrderSpec:
        """The train split's mixture order (the weighted epoch); other splits read each source's
        split whole, one source after another (weights do not apply), in the loader's order."""
        if self.split != "train":
            return options.order_spec(len(self.data), shard_of=self.data.file_id)
        if options.shuffle_for(streamed=False) == "none":  # False too, as DataLoader spells it
            raise OptionError(f"shuffle={options.shuffle!r} does not apply to a Mix's train split (its sources "
                              "are interleaved by a seeded shuffle): leave shuffle out, or pass 'global' or 'block'")
        return options.order_spec(self.plan.epoch_samples, plan=self.plan)

    def targets(self) -> SampleTargets:
        """Multi-hot classes through the merged class list, and extras as {"source", "extra"}."""
        offsets, indices, extras = [np.zeros(1, np.int64)], [], []
        remaps = merge_classes(self.names, [p.classes for p in self.parts], self.mix.classes)[1]
        for name, part, remap in zip(self.names, self.parts, remaps):
            own = open_targets(name, self.split, part)
            offsets.append(own.offsets[1:] + offsets[-1][-1])
            indices.append(remap[own.indices] if len(own.indices) else own.indices)
            extras += [{"source": name, "extra": extra} for extra in own.extras]
        return SampleTargets(len(self.data.classes), np.concatenate(offsets),
                             np.concatenate(indices).astype(np.int64), extras)

    def describe(self) -> dict[str, Any]:
        """The mixture's identity in a loader state: each source with its weight and fingerprint."""
        if not self._described:  # fingerprints hash every table: once
            self._described = {"sources": [[name, weight, fingerprint(part)] for (name, weight), part in
                                           zip(self.mix.weights.items(), self.parts)],
                               "epoch_samples": self.plan.epoch_samples, "classes": self.mix.classes,
                               "orders": self.plan.kinds, "interleave": INTERLEAVE}
        return self._described

    def state(self, order: OrderSpec, epoch: int, done: int) -> dict[str, Any]:
        """The `mixture` entry of a loader state: `describe()` and each source's position, the samples
        of its stream delivered (train: its passes one after another) once `done` samples of
        `epoch`'s global order are."""
        return {**self.describe(), "positions": self.positions(order, epoch, done)}

    def positions(self, order: OrderSpec, epoch: int, done: int) -> list[int]:
        """Each source's position after `done` samples of `epoch` (see `state`)."""
        if order.shuffle == "mix":  # a block of the order and one path of splits, whatever the epoch's length
            return [epoch * n + k for n, k in zip(self.plan.counts, self.plan.before(order.seed, epoch, done))]
        shuffle = cast(str, order.shuffle)  # OrderSpec.__post_init__ names a bool
        first = np.bincount(self.source_of(SHUFFLES[shuffle].order(order, epoch)[:done]),
                            minlength=len(self.names))
        return [int(k) for k in first]

    def check_positions(self, given: dict[str, Any], order: OrderSpec, epoch: int, done: int) -> None:
        """OptionError when a state's source positions are not where this iofeed's order puts them
        after (epoch, done): the state was saved with another mixture order, and resuming from it
        would repeat or miss samples."""
        mine = self.positions(order, epoch, done)
        theirs = _plain(given.get("positions"))
        if theirs != mine:
            raise OptionError(f"cannot resume: the state puts the sources at positions {theirs!r}, "
                              f"this loader's order at {mine} after epoch {epoch}'s first {done} samples (saved "
                              "by an iofeed whose mixture order differs: resume with that version)")

    def identity(self) -> str:
        """The "dataset" of a loader state: a hash of `describe()` but the interleave (a state of an
        older interleave is told apart by `check_state`, which takes it at an epoch's start)."""
        data = {k: v for k, v in self.describe().items() if k != "interleave"}
        return hashlib.blake2b(json.dumps(data).encode(), digest_size=10).hexdigest()

    def record(self, batch: Batch, stats: dict[str, dict[str, Any]]) -> None:
        """Count a batch per source in `stats` (name -> delivered, skipped by reason; a folder's skips
        start with what its scan rejected, as `LoaderStats.skipped` does)."""
        for name, part in zip(self.names, self.parts):
            stats.setdefault(name, {"delivered": 0, "skipped": Counter(part.rejected)})
        for s, count in zip(*np.unique(self.source_of(batch.indices), return_counts=True)):
            stats[self.names[s]]["delivered"] += int(count)
        for index, reason in batch.skipped:
            stats[self.names[int(self.source_of(np.array([index]))[0])]]["skipped"][reason_kind(reason)] += 1

    def count_fetched(self, stats: dict[str, dict[str, Any]]) -> None:
        """Each streamed source's downloads (shards, bytes, seconds) into its `stats` entry as "fetched"."""
        if isinstance(self.data.remote, MixedRemote):
            for name, fetched in zip(self.names, self.data.remote.fetched_by_source()):
                if fetched is not None and name in stats:
                    stats[name]["fetched"] = fetched

    def start_epoch(self, epoch: int, batches: EpochBatches, max_skipped: float | None, whole: bool) -> None:
        """Hold each source to `max_skipped` of its share of this rank's samples of the epoch, so that a
        broken small source cannot hide inside a large healthy one. Its share: the rank's samples times
        the source's part of what is left of the global order, rounded up (on one rank, exactly its
        samples), counted without reading the epoch (a mixture's may hold billions)."""
        counts = self._left(batches.order.get(), batches.dealing.done)
        left = max(sum(counts), 1)
        self.skips = [EpochSkips(epoch, -(-batches.samples * n // left), max_skipped, whole) for n in counts]

    def _left(self, order: MixEpoch | np.ndarray, done: int) -> list[int]:
        """Each source's samples in `order` (an epoch's global order) past its first `done`."""
        if isinstance(order, MixEpoch):
            return [n - k for n, k in zip(self.plan.counts, order.before(done))]
        left: list[int] = np.bincount(self.source_of(order[done:]), minlength=len(self.names)).tolist()
        return left

    def check_skips(self, batch: Batch, path_of: Any) -> None:
        """SampleError naming the source whose skips pass its bound."""
        where = self.source_of(batch.indices)
        skipped = self.source_of(np.array([i for i, _ in batch.skipped], np.int64))
        for s, skips in enumerate(self.skips):
            own = dataclasses.replace(batch, indices=batch.indices[where == s],
                                      skipped=[x for x, k in zip(batch.skipped, skipped) if k == s])
            try:
                skips.add(own, path_of)
            except SampleError as exc:
                raise SampleError(f"Mix source {self.names[s]}: {exc}") from None


def _plain(value: Any) -> Any:
    """`value` as JSON would give it back (tuples as lists), so a state that went through a checkpoint
    format compares equal to a fresh one; unchanged when it is not JSON."""
    try:
        return json.loads(json.dumps(value))
    except (TypeError, ValueError):
        return value


def check_state(given: Any, mixture: Mixture | None) -> None:
    """OptionError naming how a state's mixture differs from this loader's (sources, weights, epoch
    length, classes), or that one of them is not a mixture."""
    if not isinstance(given, dict):
        return  # resume.parse says what is wrong with it
    theirs = _plain(given.get("mixture"))
    if mixture is None:
        if theirs is not None:
            raise OptionError("cannot resume: the state is of an iofeed.Mix, this loader reads one source")
        return
    if theirs is None:
        raise OptionError(f"cannot resume: the state is of one source, this loader reads {mixture.mix}")
    mine = mixture.describe()
    if isinstance(theirs, dict) and "interleave" not in theirs:  # saved before the order was made by blocks
        if given.get("samples_done") not in (0, None):
            raise OptionError("cannot resume: the state was saved mid-epoch by an iofeed whose mixture order "
                              "interleaves the sources otherwise (before the block-wise order): resume with that "
                              "version, or from the start of an epoch")
        theirs = {**theirs, "interleave": INTERLEAVE}  # at an epoch's start nothing of the old order was used
    keys = {*mine, "positions"}
    if not isinstance(theirs, dict) or set(theirs) != keys or not isinstance(theirs["sources"], list) or \
            not all(isinstance(s, list) and len(s) == 3 for s in theirs["sources"]):
        raise OptionError(f"cannot resume: the state's mixture is malformed (a dict of {', '.join(sorted(keys))}, "
                          "each source [name, weight, fingerprint], expected): pass the dict state_dict() returned")
    ours, their_sources = mine["sources"], theirs["sources"]
    if [s[0] for s in their_sources] != [s[0] for s in ours]:
        raise OptionError(f"cannot resume: the state mixes {[s[0] for s in their_sources]}, this loader "
                          f"{[s[0] for s in ours]}")
    for (name, weight, print_), (_, their_weight, their_print) in zip(ours, their_sources):
        if weight != their_weight:
            raise OptionError(f"cannot resume: the state weighs {name} {their_weight:g}, this loader {weight:g}")
        if print_ != their_print:
            raise OptionError(f"cannot resume: {name} holds other samples than when the state was saved "
                              "(another dataset or split)")
    for key in ("epoch_samples", "classes", "orders", "interleave"):
        if theirs[key] != mine[key]:
            raise OptionError(f"cannot resume: the state's mixture has {key}={theirs[key]!r}, this loader "
                              f"{mine[key]!r}")
