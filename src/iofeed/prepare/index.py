"""`iofeed index`: an iofeed manifest, sample table and DALI wds2idx indexes for existing
WebDataset shards, read where they are (local paths or URLs) and never rewritten."""
from __future__ import annotations

import os
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .. import __version__
from ..errors import OptionError, SourceError
from ..format.identity import identity_of
from ..format.manifest import IMAGES_AS_IS, Manifest, SplitInfo, plain_name
from ..format.shards import INDEX_VERSION
from ..format.table import new_table, save_table
from ..format.targets import save_targets
from ..sources.folder_scan import Rejection, none_accepted, reason_kind
from ..sources.remote.urls import is_url
from .output import check_inputs, check_output, spool_dir, written_aside
from .run import REJECTED_NAME, write_rejected
from .sources.label_targets import Resolved, Targets
from .sources.one_sample_classes import one_sample_note
from .sources.shardlist import fetch_or_reject, list_shards
from .sources.tarread import Members, read_shard
from .sources.webdataset import from_txt, image_keys, refuse_captions, sample_of, shard_targets

INDEXED = "webdataset-index"  # `source.kind` of an indexed dataset: shards elsewhere, images as they are


@dataclass
class IndexSummary:
    """What `iofeed index` found."""

    out: Path
    shards: int
    samples: int
    rejected: dict[str, int]
    seconds: float
    one_sample_classes: str = ""  # a note when most classes have one sample (captions taken as classes?)


@dataclass
class _Shard:
    location: str  # the path or URL the loader reads
    identity: dict[str, Any]  # bytes, sha256, probe (and mtime_ns for a local shard): format/identity.py
    lines: list[str]  # the wds2idx lines of every sample in the shard
    accepted: list[tuple[int, int, str]]  # (data offset, size, name) of each accepted sample's image


def index_shards(spec: str, out: Path, *, split: str = "train", label_column: str | None = None,
                 image_key: str | tuple[str, ...] | None = None, overwrite: bool = False,
                 label_names: bool = False) -> IndexSummary:
    """Index the WebDataset shards `spec` names (paths, globs, brace lists, URLs) into the dataset
    folder `out`: every sample with an image and a label, in shard order, labels as preprocess
    reads them (cls, txt, json; the image by `image_key` as preprocess's --image-key; every label
    a class name as written with `label_names`). A shard that cannot be read whole in place
    (damaged, compressed, not a tar) is rejected with its samples and left out of the manifest.
    Every shard is hashed and probed (`format/identity.py`), so the loader refuses one changed
    since, and the node cache verifies its copies of remote ones."""
    start = time.perf_counter()
    out = Path(out)
    try:
        plain_name(split)  # the split names the dataset's files
    except ValueError:
        raise OptionError(f"--split {split!r}: a split is a plain name (train, val, ...), without '/'") from None
    image_key = image_keys(image_key)
    shards = list_shards(spec)
    check_inputs(out, [shard for shard in shards if not is_url(shard)], "shard")  # the more precise refusal first
    check_output(None, out, overwrite)
    remote = [is_url(shard) for shard in shards]
    if any(remote) and not all(remote):
        raise SourceError(f"{spec} names local shards ({shards[remote.index(False)]}) and URLs "
                          f"({shards[remote.index(True)]}): the loader reads one or the other, index them separately")
    with spool_dir(out) as spool:
        scanned, resolved, rejected = _scan(spec, shards, Path(spool), label_column, image_key, label_names)
    count = sum(len(s.accepted) for s in scanned)
    if not count:
        raise none_accepted(f"no sample with an image and a label in {spec}", rejected)
    table = new_table(count)
    names: list[str] = []
    infos: list[Any] = []
    for number, shard in enumerate(scanned):
        for offset, size, name in shard.accepted:
            row = table[len(names)]
            row["shard"], row["offset"], row["size"] = number, offset, size
            row["label"] = resolved.label(len(names))
            names.append(name)
    with written_aside(None, out, overwrite) as (staging, _):
        for number, shard in enumerate(scanned):
            index = f"shard-{number:06d}.idx"
            text = "".join(f"{line}\n" for line in [f"{INDEX_VERSION} {len(shard.lines)}", *shard.lines])
            (staging / index).write_text(text, encoding="utf-8")
            infos.append({"name": f"shard-{number:06d}.tar", "index": index, "samples": len(shard.accepted),
                          **shard.identity, "url": shard.location})
        table_name = f"{split}-samples.npy"
        save_table(staging / table_name, table, names)
        files = {}
        if resolved.side_file:
            rows = [[c, e] for c, e in zip(resolved.classes, resolved.extras)]
            files[split] = save_targets(staging, split, rows)
        write_rejected(staging / REJECTED_NAME, rejected)
        Manifest(
            classes=resolved.names, class_dirs=resolved.names,
            splits={split: SplitInfo(samples=count, shards=infos, table=table_name)},
            image={"encoding": IMAGES_AS_IS, "progressive": None, "colour": None, "shorter_side": None,
                   "quality": None, "raw_max_pixels": None},
            split_policy={"indexed": True},
            source={"path": str(spec), "kind": INDEXED, "label_column": label_column,
                    "image_key": list(image_key) if image_key else None, "label_names": label_names,
                    "found": count + len(rejected), "accepted": count,
                    "rejected": len(rejected),
                    "rejected_by_reason": dict(Counter(reason_kind(r.reason) for r in rejected)),
                    "empty_classes": [], "bytes_in": sum(s.identity["bytes"] for s in scanned), "modes": {},
                    "formats": {}, "mean_size": [0.0, 0.0], "median_size": [0.0, 0.0], "max_size": [0, 0]},
            created_by=f"iofeed {__version__}",
            targets=resolved.manifest_entry(files),
        ).write(staging)
    return IndexSummary(out, len(scanned), count, dict(Counter(reason_kind(r.reason) for r in rejected)),
                        time.perf_counter() - start,
                        one_sample_note("webdataset", resolved, names, str(spec), label_names))


def _scan(spec: str, shards: list[str], spool: Path | None, label_column: str | None,
          image_key: tuple[str, ...] | None, label_names: bool) -> tuple[list[_Shard], Resolved, list[Rejection]]:
    """Every shard `spec` names read and indexed (URLs copied into `spool` first), targets settled
    and resolved."""
    targets = shard_targets(label_column)
    scanned: list[Any] = []
    rejected: list[Rejection] = []
    captions: list[Any] = []
    for shard in shards:
        if is_url(shard):
            assert spool is not None, "URLs are indexed with a spool folder (`reread` reads local shards)"
            local = fetch_or_reject(shard, spool, rejected)
        else:
            local = Path(shard)
        if local is None:
            continue
        indexed = _index_one(shard, local, label_column, image_key, targets, rejected, captions)
        if indexed is not None:
            scanned.append(indexed)
        if is_url(shard):
            local.unlink()
    if label_names:
        targets.as_names()
    else:
        refuse_captions(captions, spec)
    _settle(targets, scanned, rejected)
    return scanned, targets.resolve(), rejected


def reread(shards: list[str], source: dict[str, Any]) -> tuple[list[_Shard], Resolved, list[Rejection]]:
    """The local `shards` of an indexed split read again exactly as `index_shards` read them, with
    the options its manifest's `source` records (for `iofeed inspect --verify`): each shard's
    identity and accepted samples, the targets resolved, the rejections. IofeedError when they no
    longer read or resolve."""
    image_key = tuple(source["image_key"]) if source.get("image_key") else None
    return _scan(str(source.get("path")), shards, None, source.get("label_column"), image_key,
                 bool(source.get("label_names")))


def _index_one(shard: str, local: Path, label_column: str | None, image_key: tuple[str, ...] | None,
               targets: Targets, rejected: list[Rejection], captions: list[Any]) -> _Shard | None:
    """One shard's index lines and accepted samples (targets added to `targets`, labels from
    `txt` members to `captions`); None when the shard itself is rejected (its samples are in
    `rejected`)."""
    read = read_shard(str(local), shard)
    rejected += read.rejected
    if not read.usable:
        return None
    lines, accepted = [], []
    with open(local, "rb") as f:
        for key, members in read.samples.items():
            name = f"{shard}#{key}"
            unindexable = _unindexable(key, members)
            if unindexable:
                rejected.append(Rejection(name, f"{unindexable} (a DALI index cannot hold it)"))
                continue
            lines.append(_index_line(key, members))
            try:
                image, target, extra = sample_of(f, members, label_column, image_key)
            except ValueError as exc:
                rejected.append(Rejection(name, str(exc)))
                continue
            if not image:  # left out of its index line: DALI and --verify could not find it
                rejected.append(Rejection(name, "image member without an extension (a DALI index cannot hold it)"))
                continue
            targets.add(target, extra)
            accepted.append((*members[image], name))
            if from_txt(members, label_column):
                captions.append((name, target))
        identity = identity_of(f.fileno(), in_place=not is_url(shard))  # the node cache and the loader check it
    location = shard if is_url(shard) else os.path.abspath(shard)
    return _Shard(location, identity, lines, accepted)


def _unindexable(key: str, members: Members) -> str | None:
    """Why a sample's member names cannot go into a wds2idx line (space-separated UTF-8), or None."""
    names = "".join([key, *members])
    if any(c.isspace() for c in names):
        return "whitespace in a member name"
    try:
        names.encode("utf-8")
    except UnicodeEncodeError:  # bytes tarfile kept as surrogates
        return "member name not UTF-8"
    return None


def _settle(targets: Targets, scanned: list[_Shard], rejected: list[Rejection]) -> None:
    """Reject the accepted samples whose label cannot be stored (`Targets.check`), by name."""
    bad = targets.check([name for shard in scanned for _, _, name in shard.accepted])
    number = 0
    for shard in scanned:
        kept = []
        for sample in shard.accepted:
            if number in bad:
                rejected.append(Rejection(sample[2], bad[number]))
            else:
                kept.append(sample)
            number += 1
        shard.accepted = kept
    targets.keep([i for i in range(number) if i not in bad])


def _index_line(key: str, members: Members) -> str:
    """One wds2idx line: `<ext> <data offset> <size> <member name>` per member (a member without
    an extension has no name DALI could ask for, and is left out)."""
    return " ".join(f"{ext} {offset} {size} {key}.{ext}" for ext, (offset, size) in members.items() if ext)

