"""`iofeed inspect --verify` of the labels beyond the table's column: each split's targets file
(`<split>-targets.jsonl`) read and compared row by row with what the shards hold, and the shards
of a dataset indexed in place read again as `iofeed index` read them (identity, samples, labels)."""
from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np

from ..errors import DatasetError, IofeedError
from ..format.files import read_regular
from ..format.manifest import Manifest
from ..format.shards import IndexedSample
from ..format.targets import multi_hot, parse_targets
from ..sources.remote.urls import is_url

Found = list[Any]  # per table row: [classes, extra] as the shards hold them, None where not read
_IDENTITY = ("bytes", "sha256", "probe")


def member_targets(fd: int, entry: IndexedSample, kind: str) -> list[Any]:
    """[classes, extra] of one preprocessed sample from its members (`cls` or `classes.json`, and
    `json`); ValueError when one does not parse."""
    def member(ext: str) -> bytes:
        offset, size = entry.members[ext]
        return os.pread(fd, size, offset)

    try:
        readers: dict[str, Callable[[], list[Any]]] = {"class": lambda: [int(member("cls"))],
                                                       "multi_label": lambda: json.loads(member("classes.json"))}
        classes = readers.get(kind, list)()
        extra = json.loads(member("json")) if "json" in entry.members else None
    except (KeyError, ValueError) as exc:
        raise ValueError(f"a label member does not parse ({type(exc).__name__}: {exc})") from None
    return [classes, extra]


def check_targets(path: Path, manifest: Manifest, split: str, rows: int, found: Found) -> list[str]:
    """The problems of `split`'s targets file: missing where the manifest needs one, unreadable,
    malformed, short, a class out of range, or a row that disagrees with its shard."""
    targets = manifest.targets
    name = targets.get("files", {}).get(split)
    if name is None:
        if targets.get("kind", "class") != "class" or targets.get("extras"):
            return [f"{split}: the manifest's targets ({targets.get('kind')}, extras {targets.get('extras')}) "
                    "need a targets file, and it names none"]
        return []
    where = Path(path) / name
    try:
        classes, extras = parse_targets(read_regular(where).decode("utf-8"), str(where), rows)
        multi_hot(classes, len(manifest.classes), str(where))
    except DatasetError as exc:
        return [str(exc)]
    except OSError as exc:
        return [f"{where}: {exc.strerror or exc}"]
    except UnicodeDecodeError as exc:
        return [f"{where}: not UTF-8 ({exc.reason})"]
    wrong = [i for i, row in enumerate(found)
             if row is not None and _canonical([classes[i], extras[i]]) != _canonical(row)]
    if not wrong:
        return []
    first = wrong[0]
    return [f"{where} row {first + 1}: {_canonical([classes[first], extras[first]])}, its shard holds "
            f"{_canonical(found[first])} ({len(wrong)} of {rows} rows disagree with their shards)"]


def _canonical(row: Any) -> str:
    return json.dumps(row, sort_keys=True)


class Reread(NamedTuple):
    """What reading a split indexed in place again found."""

    problems: list[str]
    found: Found  # each row's [classes, extra] as the shards now say (None where not read)
    hashed: int = 0  # shards whose sha256 was compared
    relabelled: int = 0  # samples whose label was compared


def indexed_problems(manifest: Manifest, split: str, table: np.ndarray, sources: list[str]) -> Reread:
    """The problems of a split indexed in place, its local shards read again as `iofeed index` read
    them: each shard's size, sha256 and probe, the samples it holds, each one's label; and every
    row's [classes, extra] for the targets file. Shards at URLs are not read."""
    none: Found = [None] * len(table)
    shards = manifest.splits[split].shards
    locations = [s["url"] for s in shards]
    if any(is_url(where) for where in locations):
        return Reread([], none)
    from .index import reread

    try:
        now, resolved, rejected = reread(locations, manifest.source)
    except IofeedError as exc:
        return Reread([f"{split}: its shards no longer read as they were indexed: {exc}"], none)
    gone = [where for where in locations if where not in {read.location for read in now}]
    if gone:
        why = next((r.reason for r in rejected if r.path.startswith(gone[0])), "rejected")
        return Reread([f"{gone[0]} no longer reads whole ({why}; {len(gone)} of {len(locations)} shards): "
                       "index the shards again"], none)
    problems, hashed = [], sum(bool(shard.get("sha256")) for shard in shards)
    for where, shard, read in zip(locations, shards, now):
        changed = [key for key in _IDENTITY if shard.get(key) not in (None, "") and read.identity[key] != shard[key]]
        if changed:
            problems.append(f"{where}: its {', '.join(changed)} changed since `iofeed index` (index it again)")
    spans = [(n, offset, size) for n, read in enumerate(now) for offset, size, _ in read.accepted]
    recorded = list(zip(table["shard"].tolist(), table["offset"].tolist(), table["size"].tolist()))
    if spans != recorded:
        first = next((i for i, (a, b) in enumerate(zip(spans, recorded)) if a != b), min(len(spans), len(recorded)))
        at = sources[first] if first < len(sources) else "the end of the table"
        return Reread([*problems, f"{split}: the shards now hold {len(spans)} samples with an image and a label, "
                                  f"the table {len(recorded)}; the first that differs is {at} (index them again)"],
                      none, hashed)
    if resolved.names != manifest.classes:
        return Reread([*problems, f"{split}: the shards' labels now make the classes {_few(resolved.names)}, the "
                                  f"manifest has {_few(manifest.classes)} (index them again)"], none, hashed)
    labels = np.array([resolved.label(i) for i in range(len(spans))], dtype=np.int64)
    wrong = np.flatnonzero(labels != table["label"])
    if wrong.size:
        i = int(wrong[0])
        problems.append(f"{sources[i]}: its shard now labels it {_name(manifest, labels[i])}, the table "
                        f"{_name(manifest, table['label'][i])} ({wrong.size} of {len(spans)} labels disagree: "
                        "the shards changed since `iofeed index`; index them again)")
    return Reread(problems, [[c, e] for c, e in zip(resolved.classes, resolved.extras)], hashed, len(spans))


def _name(manifest: Manifest, label: int) -> str:
    return repr(manifest.classes[label]) if 0 <= label < len(manifest.classes) else "with no class"


def _few(names: list[str]) -> str:
    return "[" + ", ".join(names[:5]) + (", ...]" if len(names) > 5 else "]")
