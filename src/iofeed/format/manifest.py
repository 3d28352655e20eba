"""`iofeed.json`: the manifest of an iofeed dataset, its format version, read and write."""
from __future__ import annotations

import json
import os
import re
import uuid
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from ..errors import DatasetError, OptionError
from .files import read_regular
from .table import SOURCES
from .targets import DEFAULT_TARGETS, check_targets

MANIFEST_NAME = "iofeed.json"
FORMAT_NAME = "iofeed-dataset"
FORMAT_VERSION = 4  # 2 added raw-pixel samples (the `encoding` column); 3 the dataset id; 4 `targets`
READABLE_VERSIONS = (1, 2, 3, 4)
IMAGES_AS_IS = "as-is"  # `image.encoding` of shards indexed in place (`iofeed index`): images never validated


@dataclass
class SplitInfo:
    """One split: its sample count, shard files and sample table."""

    samples: int
    shards: list[dict[str, Any]]  # ShardInfo fields (sha256, probe: absent in older datasets)
    table: str  # the .npz sample table file


@dataclass
class Manifest:
    """Everything needed to read an iofeed dataset, and how it was made."""

    classes: list[str]
    class_dirs: list[str]
    splits: dict[str, SplitInfo]
    image: dict[str, Any]  # policy: encoding (jpeg, raw or mixed), shorter side, quality, raw_max_pixels
    split_policy: dict[str, Any]
    source: dict[str, Any]  # statistics of the input
    format: str = FORMAT_NAME
    version: int = FORMAT_VERSION
    created_by: str = field(default="")
    dataset_id: str = field(default_factory=lambda: uuid.uuid4().hex)  # new for every write; "" before version 3
    targets: dict[str, Any] = field(default_factory=lambda: dict(DEFAULT_TARGETS))  # format/targets.py

    def write(self, directory: Path) -> None:
        """Write `iofeed.json` into `directory`."""
        text = json.dumps(asdict(self), indent=2, sort_keys=False)
        (Path(directory) / MANIFEST_NAME).write_text(text + "\n", encoding="utf-8")

    @classmethod
    def read(cls, directory: Path) -> Manifest:
        """Read and validate `directory/iofeed.json`; DatasetError says what is wrong."""
        path = Path(directory) / MANIFEST_NAME
        if not os.path.lexists(directory):
            raise DatasetError(f"no such path: {directory} (give an iofeed dataset folder, made with `iofeed "
                               "preprocess`)")
        if not os.path.lexists(path):
            raise DatasetError(f"not an iofeed dataset: {path} is missing (make one with `iofeed preprocess`)")
        try:
            text = read_regular(path).decode("utf-8")
        except (OSError, ValueError) as exc:
            raise DatasetError(f"unreadable manifest {path}: {exc}") from None
        return cls.parse(text, str(path))

    @classmethod
    def parse(cls, text: str, where: str) -> Manifest:
        """Validate the manifest `text` read from `where` (a path or URL, for messages)."""
        try:
            raw = json.loads(text)
        except ValueError as exc:
            raise DatasetError(f"unreadable manifest {where}: {exc}") from None
        kind = raw.get("format") if isinstance(raw, dict) else type(raw).__name__
        if kind != FORMAT_NAME:
            raise DatasetError(f"{where} is not an iofeed manifest (format={kind!r})")
        version = raw.get("version")
        if isinstance(version, int) and not isinstance(version, bool) and version > FORMAT_VERSION:
            raise DatasetError(
                f"{where} was written by a newer iofeed (format version {version}; this iofeed reads "
                f"versions up to {FORMAT_VERSION}): upgrade iofeed (`pip install -U iofeed`)"
            )
        if isinstance(version, bool) or version not in READABLE_VERSIONS:
            raise DatasetError(
                f"{where} has format version {raw.get('version')}; this iofeed reads versions "
                f"{', '.join(map(str, READABLE_VERSIONS))}: run `iofeed preprocess` again"
            )
        try:
            _check_types(raw)
            raw["splits"] = {name: SplitInfo(**info) for name, info in raw["splits"].items()}
            raw.setdefault("dataset_id", "")
            raw.setdefault("targets", dict(DEFAULT_TARGETS))
            check_targets(raw["targets"])
            manifest = cls(**raw)
            for name, info in manifest.splits.items():
                for file in [info.table, *(s[key] for s in info.shards for key in ("name", "index")),
                             *manifest.targets.get("files", {}).values(),
                             *((manifest.targets.get("captions") or {}).get("files") or {}).values()]:
                    plain_name(file)
                if sum(int(s["samples"]) for s in info.shards) != int(info.samples):
                    raise ValueError(f"split {name!r}: its shards do not add up to {info.samples} samples")
        except (AttributeError, KeyError, TypeError, ValueError) as exc:
            raise DatasetError(f"malformed manifest {where}: {exc} (run `iofeed preprocess` again)") from None
        return manifest

    def split(self, name: str, where: str) -> SplitInfo:
        """Split `name`; OptionError lists the splits of the dataset at `where`."""
        if name not in self.splits:
            raise OptionError(f"split {name!r} not in {where} (it has: {', '.join(self.splits)})")
        return self.splits[name]


# The names preprocess gives the files it writes: only for a folder without a manifest to go by
# (an upload that stopped before its `iofeed.json`); otherwise `written_files` says what is iofeed's.
DATASET_NAME = re.compile(r"rejected\.jsonl|[\w.-]+-samples\.(npy|sources\.jsonl|sources\.txt)"
                          r"|[\w.-]+-targets\.jsonl|[\w.-]+-boxes\.npz|[\w.-]+-captions\.npz|[\w.-]+-masks\.npy"
                          r"|[\w.-]+-\d{6}\.(tar|idx)")


def written_files(manifest: Manifest) -> set[str]:
    """The files of a dataset's folder that preprocess or index wrote, as its manifest lists them:
    the manifest, `rejected.jsonl`, each split's table and source list, its shards and their
    indexes, the targets files, detection's boxes and masks files. A shard indexed in place (it
    has a `url`) is the user's file, wherever it lies: only its index is iofeed's. `--overwrite`
    replaces these and nothing else."""
    boxes = manifest.targets.get("boxes") or {}  # detection side files: {"files": {split: name}, "masks": ...}
    captions = (manifest.targets.get("captions") or {}).get("files") or {}  # kind "text": {split: name}
    ours = {MANIFEST_NAME, "rejected.jsonl", *manifest.targets.get("files", {}).values(), *captions.values(),
            *(name for kind in ("files", "masks") for name in (boxes.get(kind) or {}).values()
              if isinstance(name, str))}
    for info in manifest.splits.values():
        stem = Path(info.table).stem
        ours |= {info.table, stem + SOURCES, stem + ".sources.txt"}
        for shard in info.shards:
            ours |= {shard["index"]} if "url" in shard else {shard["index"], shard["name"]}
    return ours


_INT = "an integer"
_SHARD_FIELDS = {"name": str, "index": str, "samples": _INT, "bytes": _INT}


def _check_types(raw: dict[str, Any]) -> None:
    """ValueError naming the first key whose value has the wrong type (`"samples": "10"`,
    `"classes": 5`): the manifest is read from disk or a URL, so nothing in it is trusted."""
    for key in ("classes", "class_dirs"):
        if not isinstance(raw.get(key), list) or not all(isinstance(n, str) for n in raw[key]):
            raise ValueError(f'"{key}" must be a list of names, got {_short(raw.get(key))}')
    if not isinstance(raw.get("splits"), dict):
        raise ValueError(f'"splits" must be an object of splits, got {_short(raw.get("splits"))}')
    for name, info in raw["splits"].items():
        if not isinstance(info, dict) or not isinstance(info.get("shards"), list):
            raise ValueError(f"split {name!r} must be an object with a list of \"shards\", got {_short(info)}")
        _check_field(info, "samples", _INT, f"split {name!r}")
        for number, shard in enumerate(info["shards"]):
            if not isinstance(shard, dict):
                raise ValueError(f"shard {number} of split {name!r} must be an object, got {_short(shard)}")
            for key, kind in _SHARD_FIELDS.items():
                _check_field(shard, key, kind, f"shard {number} of split {name!r}")
            for key in ("sha256", "probe"):
                if not isinstance(shard.get(key, ""), str):
                    raise ValueError(f'"{key}" of shard {number} of split {name!r} must be a string, '
                                     f"got {_short(shard[key])}")
            if "mtime_ns" in shard:
                _check_field(shard, "mtime_ns", _INT, f"shard {number} of split {name!r}")


def _check_field(values: dict[str, Any], key: str, kind: Any, what: str) -> None:
    value = values.get(key)
    if kind == _INT:
        ok = isinstance(value, int) and not isinstance(value, bool) and 0 <= value < 2**63
        kind = "an integer in 0..2^63-1"
    else:
        ok = isinstance(value, kind)
        kind = "a string"
    if not ok:
        raise ValueError(f'"{key}" of {what} must be {kind}, got {_short(value)}')


def _short(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def plain_name(name: object) -> str:
    """`name` if it names a file in the dataset's own directory; ValueError for anything that
    could leave it (absolute, `..`, a sub-path, empty, not a string)."""
    if not isinstance(name, str) or not name or name in (".", "..") or "/" in name or "\\" in name or "\0" in name:
        raise ValueError(f"file name {name!r} leaves the dataset directory (only plain names inside it are allowed)")
    return name
