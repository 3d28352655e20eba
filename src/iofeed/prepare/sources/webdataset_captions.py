"""The `webdataset` source with `--target text`: image-text shards as img2dataset writes them (`jpg`,
`txt`, `json` with key/url/caption/width/height) read with each sample's caption as its target, no
classes. The caption is the member or json key `--label-column` names, else the `txt` member, else
the json's `caption`; kept exactly as written. The rules (docs/formats.md, "Captions"): UTF-8 only
(a leading byte-order mark dropped; any other encoding is rejected, never guessed: latin-1 would
read every byte string), never blank, a json caption a string; the json member comes along as the
sample's extra, and an unreadable one rejects its sample."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any, BinaryIO

from ...sources.folder_scan import Rejection
from ...sources.remote.urls import is_url
from .base import SourceOptions, SourceScan
from .label_targets import Targets
from .shardlist import fetch_or_reject, list_shards
from .tarread import Members, read_shard
from .webdataset import _image, _read

CAPTION_KEY = "caption"  # img2dataset's json field (and the member it writes as `txt`)
BOM = "\ufeff"
SIDECARS = ("_stats.json", ".parquet")  # what img2dataset writes beside each shard


def scan_captions(src: str, options: SourceOptions) -> SourceScan:
    """Every sample of the shards `src` names, its caption the target (`SourceScan.captions`)."""
    result = SourceScan(root=str(src), kind="webdataset", targets=Targets(json_targets=True), captions=[])
    for shard in without_sidecars(list_shards(src)):
        local = fetch_or_reject(shard, _spool(options), result.rejected) if is_url(shard) else shard
        if local is None:
            continue
        read = read_shard(str(local), shard, options.spool)
        result.rejected += read.rejected
        if not read.samples:
            continue
        with open(read.path, "rb") as f:
            for key, members in read.samples.items():
                name = f"{shard}#{key}"
                try:
                    image, caption, extra = caption_sample(f, members, options.label_column, options.image_key)
                except ValueError as exc:
                    result.rejected.append(Rejection(name, str(exc)))
                    continue
                result.add(read.path, name, None, extra, members[image])
                assert result.captions is not None
                result.captions.append(caption)
    return result


def without_sidecars(shards: list[str]) -> list[str]:
    """The shards of a folder less img2dataset's files beside them (`00000_stats.json`,
    `00000.parquet` for shard `00000.tar`): metadata of the shards, not shards to reject."""
    beside = {shard[: -len(".tar")] + tail for shard in shards if shard.endswith(".tar") for tail in SIDECARS}
    return [shard for shard in shards if shard not in beside]


def _spool(options: SourceOptions) -> Path:
    """Where remote shards are copied (preprocess always gives one)."""
    assert options.spool is not None, "preprocess gives the source a spool folder"
    return options.spool


def caption_sample(f: BinaryIO, members: Members, caption_key: str | None,
                   image_key: tuple[str, ...] | None = None) -> tuple[str, str, Any]:
    """(image extension, caption, extra) of one sample; ValueError with the rejection reason."""
    image = _image(f, members, image_key)
    extra = None
    if "json" in members:
        try:
            extra = json.loads(_read(f, members["json"]).decode("utf-8"))
        except UnicodeDecodeError as exc:
            raise ValueError(f"unreadable json member (byte {exc.start} is not UTF-8)") from None
        except ValueError as exc:
            raise ValueError(f"unreadable json member ({exc})") from None
    caption, where = _caption(f, members, extra, caption_key)
    if caption is None:
        wanted = caption_key or f"txt member or json '{CAPTION_KEY}'"
        raise ValueError(f"no caption ({wanted}; members: {', '.join(sorted(members))})")
    if not caption.strip():
        raise ValueError(f"empty caption (its {where} is blank)")
    return image, caption, extra


def _caption(f: BinaryIO, members: Members, extra: Any, key: str | None) -> tuple[str | None, str]:
    """(the caption as written or None, where it is written)."""
    member = key if key is not None else "txt"
    if member in members and member != "json":
        return caption_text(_read(f, members[member]), f"{member} member"), f"{member} member"
    field = key if key not in (None, "json") else CAPTION_KEY
    if isinstance(extra, dict) and field in extra and extra[field] is not None:
        value = extra[field]
        if not isinstance(value, str):
            raise ValueError(f"caption not text (json {field!r} is {json.dumps(value)[:40]})")
        return value.removeprefix(BOM), f"json {field!r}"
    return None, ""


def caption_text(data: bytes, where: str) -> str:
    """A caption member's text exactly as written (a leading byte-order mark dropped); ValueError
    naming the first byte that is not UTF-8."""
    try:
        return data.decode("utf-8").removeprefix(BOM)
    except UnicodeDecodeError as exc:
        raise ValueError(f"caption not UTF-8 (its {where}: byte 0x{data[exc.start]:02x} at {exc.start}; write "
                         "captions as UTF-8)") from None

