"""Shard lists as users write them: a path, a glob, a brace list (`shards-{000000..000127}.tar`),
a folder of shards, or s3/gs/http(s) URLs; remote shards copied into the spool folder."""
from __future__ import annotations

import glob
import os
import re
from pathlib import Path

from ...errors import SourceError
from ...remote.spool import download
from ...remote.urls import is_url

_BRACE = re.compile(r"\{([^{}]*)\}")
_RANGE = re.compile(r"^(\d+)\.\.(\d+)$")
TAR_MAGIC_AT = 257  # "ustar" in a POSIX tar header


def expand_braces(text: str) -> list[str]:
    """Every string a brace pattern names, in order: `a{1..3}` → a1 a2 a3 (zero padding kept
    from the first bound), `{x,y}z` → xz yz; several groups multiply."""
    match = _BRACE.search(text)
    if match is None:
        return [text]
    head, body, tail = text[: match.start()], match.group(1), text[match.end():]
    numbers = _RANGE.match(body)
    if numbers:
        low, high = numbers.groups()
        if int(high) < int(low):
            raise SourceError(f"empty range {{{body}}} in {text!r}: the first bound must not pass the second")
        width = len(low) if low.startswith("0") else 0
        choices = [str(n).zfill(width) for n in range(int(low), int(high) + 1)]
    else:
        choices = body.split(",")
    return [head + choice + rest for choice in choices for rest in expand_braces(tail)]


def is_tar(path: str | Path) -> bool:
    """Whether the file at `path` starts with a POSIX/GNU tar header (by content, not by name)."""
    try:
        with open(path, "rb") as f:
            head = f.read(TAR_MAGIC_AT + 5)
    except OSError:
        return False
    return head[TAR_MAGIC_AT:TAR_MAGIC_AT + 5] == b"ustar"


def list_shards(spec: str) -> list[str]:
    """The shards `spec` names (URLs stay URLs); SourceError when it names none."""
    found: list[str] = []
    for item in expand_braces(str(spec)):
        if is_url(item):
            found.append(item)
        elif os.path.isdir(item):
            found += [str(p) for p in sorted(Path(item).iterdir()) if p.is_file() and is_tar(p)]
        elif glob.has_magic(item):
            found += sorted(glob.glob(item))
        else:
            if not os.path.exists(item):
                raise SourceError(f"shard not found: {item} (give tar shards as paths, globs, "
                                  "brace lists or URLs)")
            found.append(item)
    if not found:
        raise SourceError(f"no tar shards in {spec}")
    return found


def fetch(url: str, spool: Path) -> Path:
    """A local copy of the shard at `url` in `spool` (`remote.spool.download`: retried, errors
    naming the URL and the cause)."""
    spool.mkdir(parents=True, exist_ok=True)
    target = spool / f"{len(list(spool.iterdir())):06d}.tar"
    download(url, target)
    return target
