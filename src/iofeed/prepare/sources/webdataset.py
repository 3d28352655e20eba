"""The `webdataset` source: WebDataset tar shards (paths, globs, brace lists, URLs). A sample is
the members sharing a key; its image is the member whose bytes are an image (jpg, jpeg, png,
webp, ... by content), its label `cls` (an index or a name), `txt` (a name) or `json` (its
`label`, or the key `--label-column` names); a `json` member also comes along as the extra."""
from __future__ import annotations

import json
import tarfile
from typing import Any

from ...errors import SourceError
from ...image.sniff import SNIFF_BYTES, sniff_bytes
from ...remote.urls import is_url
from ..scan import Rejection
from .base import SourceOptions, SourceScan
from .shardlist import fetch, list_shards
from .targets import Targets, member_label, missing

LABEL_EXTENSIONS = ("cls", "txt", "json")
DEFAULT_JSON_LABEL = "label"

Members = dict[str, tuple[int, int]]  # extension -> (data offset, size)


def split_member(name: str) -> tuple[str, str]:
    """(key, extension) of a member name as WebDataset reads it: the key runs to the first dot of
    the base name (folders included), the extension is the rest."""
    dot = name.find(".", name.rfind("/") + 1)
    return (name, "") if dot < 0 else (name[:dot], name[dot + 1:])


def read_samples(path: str) -> dict[str, Members]:
    """Every sample of the tar at `path`, by key in order, with its members' data spans."""
    samples: dict[str, Members] = {}
    try:
        with tarfile.open(path, "r:") as tar:
            for info in tar:
                if not info.isfile():
                    continue
                key, ext = split_member(info.name)
                samples.setdefault(key, {})[ext] = (info.offset_data, info.size)
    except (tarfile.TarError, OSError) as exc:
        raise SourceError(f"unreadable tar shard {path}: {exc} (pass WebDataset .tar shards)") from None
    return samples


def scan(src: str, options: SourceOptions) -> SourceScan:
    """Every sample of the shards `src` names; remote shards are copied into the spool first."""
    result = SourceScan(root=str(src), kind="webdataset", targets=shard_targets(options.label_column))
    for shard in list_shards(src):
        local = str(fetch(shard, options.spool)) if is_url(shard) else shard
        with open(local, "rb") as f:
            for key, members in read_samples(local).items():
                name = f"{shard}#{key}"
                try:
                    image, target, extra = sample_of(f, members, options.label_column)
                except ValueError as exc:
                    result.rejected.append(Rejection(name, str(exc)))
                    continue
                result.add(local, name, target, extra, members[image])
    return result


def shard_targets(label_column: str | None) -> Targets:
    """The targets of shards read with `label_column`: `json` takes each whole json member as the
    target (captions, boxes: a dataset without classes)."""
    return Targets(json_targets=label_column == "json")


def sample_of(f, members: Members, label_key: str | None) -> tuple[str, Any, Any]:
    """(image extension, target, extra) of one sample; ValueError with the rejection reason."""
    image = next((ext for ext in members if ext not in LABEL_EXTENSIONS and _is_image(f, members[ext])), None)
    if image is None:
        raise ValueError(f"no image (members: {', '.join(sorted(members)) or 'none'})")
    extra = None
    if "json" in members:
        try:
            extra = json.loads(_read(f, members["json"]))
        except ValueError as exc:
            raise ValueError(f"unreadable json member ({exc})") from None
    target = _target(f, members, extra, label_key)
    if missing(target):
        wanted = label_key or f"cls, txt or json '{DEFAULT_JSON_LABEL}'"
        raise ValueError(f"no label ({wanted}; members: {', '.join(sorted(members))})")
    return image, target, extra


def _target(f, members: Members, extra: Any, label_key: str | None) -> Any:
    """The sample's label: the member or json key `label_key`, else cls, txt, json 'label'."""
    if label_key is not None and label_key in members and label_key != "json":
        return member_label(_read(f, members[label_key]), label_key)
    key = label_key or DEFAULT_JSON_LABEL
    if label_key is None:
        for ext in ("cls", "txt"):
            if ext in members:
                return member_label(_read(f, members[ext]), ext)
    if label_key == "json":  # the whole json member is the target (captions, boxes: no class)
        return extra
    return extra.get(key) if isinstance(extra, dict) else None


def _is_image(f, span: tuple[int, int]) -> bool:
    offset, size = span
    f.seek(offset)
    return size > 0 and sniff_bytes(f.read(min(size, SNIFF_BYTES))) is not None


def _read(f, span: tuple[int, int]) -> bytes:
    offset, size = span
    f.seek(offset)
    return f.read(size)
