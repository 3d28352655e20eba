"""Shard lists as users write them: a path, a glob, a brace list (`shards-{000000..000127}.tar`),
a folder of shards, or s3/gs/http(s) URLs, each shard once and braces bounded; remote shards
copied into the spool folder within its room (one that cannot be read is a rejection, one not there
an error)."""
from __future__ import annotations

import glob
import math
import os
import re
from pathlib import Path

from ...errors import SourceError
from ...sources.folder_scan import Rejection
from ...sources.remote.retry import describe, policy_from_env, with_retries
from ...sources.remote.urls import filesystem, is_url, scheme
from .spool import copy_within, spool_room

_GROUP = re.compile(r"\{([^{}]*)\}")
_RANGE = re.compile(r"^(\d+)\.\.(\d+)$")
_COMPRESSED_NAME = re.compile(r"(\.tar\.(gz|bz2|xz)|\.tgz|\.tbz2?|\.txz)$")  # a compressed tar's name
MAX_NAMES = 1_000_000  # shards one pattern may name: far above any dataset, far below a MemoryError


def expand_braces(text: str) -> list[str]:
    """Every string a brace pattern names, in order: `a{1..3}` → a1 a2 a3 (zero padding kept
    from the first bound), `{x,y}z` → xz yz; several groups multiply. Nested or unbalanced braces
    and patterns naming more than MAX_NAMES shards are refused (SourceError)."""
    _check_braces(text)
    bodies = _GROUP.findall(text)
    sizes = [len(numbers) if (numbers := _bounds(body, text)) else body.count(",") + 1 for body in bodies]
    if math.prod(sizes) > MAX_NAMES:
        raise SourceError(f"{text!r} names more than {MAX_NAMES:,} shards: check its brace ranges "
                          "(shards-{000000..000127}.tar names 128)")
    parts = _GROUP.split(text)[::2]  # the text around the groups
    names = [parts[0]]
    for body, after in zip(bodies, parts[1:]):
        numbers, low = _bounds(body, text), body.split("..")[0]
        width = len(low) if low.startswith("0") else 0  # zero padding kept from the first bound
        choices = [str(n).zfill(width) for n in numbers] if numbers else body.split(",")
        names = [name + choice + after for name in names for choice in choices]
    return names


def _bounds(body: str, text: str) -> range | None:
    """The numbers a `{low..high}` group names (None for a list)."""
    numbers = _RANGE.match(body)
    if not numbers:
        if ".." in body and "," not in body:  # {a..e}, {0..10..2}, {-1..3}: a range it would take literally
            raise SourceError(f"unsupported range {{{body}}} in {text!r}: ranges are {{LOW..HIGH}} of whole numbers "
                              "(or list the names: {a,b,c})")
        return None
    low, high = (int(n) for n in numbers.groups())
    if high < low:
        raise SourceError(f"empty range {{{body}}} in {text!r}: the first bound must not pass the second")
    return range(low, high + 1)


def _check_braces(text: str) -> None:
    depth = 0
    for char in text:
        depth += {"{": 1, "}": -1}.get(char, 0)
        if depth > 1:
            raise SourceError(f"nested braces in {text!r} are not supported: write one group per position "
                              "({a,b,c} or {000..009})")
        if depth < 0:
            break
    if depth:
        raise SourceError(f"unbalanced braces in {text!r}: each {{ needs its }}")


def list_shards(spec: str) -> list[str]:
    """The shards `spec` names (URLs stay URLs): every file of a folder, tar or not, and its broken
    links (reading names what is not a tar); SourceError when a path or glob names nothing, or
    one shard is named twice."""
    found: list[str] = []
    for item in expand_braces(str(spec)):
        if is_url(item):
            found.append(item)
        elif os.path.isdir(item):
            found += [str(p) for p in sorted(Path(item).iterdir()) if p.is_file() or p.is_symlink()]
        elif glob.has_magic(item):
            matches = sorted(glob.glob(item))
            if not matches:
                raise SourceError(f"no file matches {item} (check the pattern; each glob of a list must match)")
            found += matches
        else:
            if not os.path.exists(item):
                raise SourceError(f"shard not found: {item} (give tar shards as paths, globs, "
                                  "brace lists or URLs)")
            found.append(item)
    if not found:
        raise SourceError(f"no tar shards in {spec}")
    _check_once(spec, found)
    _check_twins(found)
    return found


def _check_twins(shards: list[str]) -> None:
    """SourceError naming `x.tar` and `x.tar.gz` (or .tgz, .bz2, .xz) when both are listed: one
    is the other compressed (a `gzip -k` or `gunzip -k` left both), so reading both would store
    each sample twice, and reading one of them silently would drop the other's samples if they
    differ. The user knows which one is meant."""
    seen: dict[str, str] = {}
    for shard in shards:
        stem = _COMPRESSED_NAME.sub(".tar", shard)
        other = seen.setdefault(stem, shard)
        if other != shard:
            first, second = sorted((other, shard), key=len)
            raise SourceError(f"{first} and {second} look like two copies of one shard ({os.path.basename(stem)}, "
                              "compressed): reading both would store its samples twice; name the one to read (a "
                              "glob such as DIR/*.tar) or move the other away")


def _check_once(spec: str, shards: list[str]) -> None:
    """SourceError when two names in `shards` are one shard (the same URL, or paths to one file:
    a symlink or a hard link): reading it twice would put each of its samples in the dataset
    twice, in train and val alike."""
    seen: dict[object, str] = {}
    for shard in shards:
        identity = shard if is_url(shard) else _file_identity(shard)
        if identity in seen:
            same = "" if seen[identity] == shard else f" (as {seen[identity]} and {shard})"
            raise SourceError(f"{spec} names the shard {shard} twice{same}: name each shard once")
        seen[identity] = shard


def _file_identity(path: str) -> object:
    try:
        info = os.stat(path)
    except OSError:  # a broken link: reading it names it
        return os.path.realpath(path)
    return info.st_dev, info.st_ino


class Unfetchable(SourceError):
    """A remote shard that is there but could not be read (denied, failing after the retries):
    a rejection of that shard, named by its URL, not the end of the run."""


def fetch(url: str, spool: Path, room: int | None = None) -> Path:
    """A local copy of the shard at `url` in `spool` (streamed to disk, retried when transient),
    within `room` bytes (None: `spool_room`, the disk's free space less a reserve). SourceError
    when it is not there (a wrong name in the list) or passes the room (`copy_within`: nothing
    left), Unfetchable when it cannot be read."""
    entry, policy = scheme(url), policy_from_env()
    fs = filesystem(url, None, policy)  # its per-attempt deadlines follow IOFEED_RETRY_SECONDS too
    spool.mkdir(parents=True, exist_ok=True)
    target = spool / f"{len(list(spool.iterdir())):06d}.tar"
    room = spool_room(spool) if room is None else room

    def copy() -> None:
        with fs.open(url, "rb", **entry.stream) as src:
            copy_within(iter(lambda: src.read(8 << 20), b""), target, room, url, "downloaded")

    try:
        with_retries(copy, policy)
    except SourceError:  # past the room, or the disk failed the write: said as it is, not as the storage's
        raise
    except Exception as exc:  # noqa: BLE001 - storage errors of any library, judged by their cause
        target.unlink(missing_ok=True)
        what = describe(exc)  # fsspec calls every failed HTTP open "not found": only a real 404 is
        if what.startswith("not found"):
            raise SourceError(f"shard not found: {url} ({what})") from None
        raise Unfetchable(f"{url}: {what}") from None
    return target


def fetch_or_reject(url: str, spool: Path, rejected: list[Rejection]) -> Path | None:
    """`fetch`, or None with the shard's rejection added to `rejected` when it cannot be read."""
    try:
        return fetch(url, spool)
    except Unfetchable as exc:
        rejected.append(Rejection(url, f"unreadable shard ({str(exc).removeprefix(url + ': ')}; its samples "
                                       "could not be counted)"))
        return None
