"""Earlier spellings of `iofeed.loader`'s settings, each refused in one line that names the one
spelling it has now, with the value given (why one spelling: docs/decisions/0002-one-spelling-per-setting.md)."""
from __future__ import annotations

import difflib
from collections.abc import Collection, Mapping
from typing import Any

from ..errors import OptionError
from .groups import GROUPS

# an earlier loader() keyword -> (its keyword now, the field of that keyword's object; "": renamed)
RENAMED: dict[str, tuple[str, str]] = {
    "backend": ("engine", ""),
    "device": ("placement", "device"), "rank": ("placement", "rank"), "world_size": ("placement", "world_size"),
    "sharding": ("placement", "sharding"),
    "pixels": ("output", "pixels"), "dtype": ("output", "dtype"), "memory_format": ("output", "memory_format"),
                                       "target": ("output", "target"),
    "extras": ("output", "extras"),
    "block_shards": ("order", "block_shards"),
    "prefetch": ("resources", "prefetch"), "memory_budget": ("resources", "memory_budget"),
    "cache_dir": ("cache", "dir"), "cache_limit": ("cache", "limit"),
    "on_error": ("skips", "on_error"), "max_skipped": ("skips", "max_skipped"),
}


def spelled_now(old: Mapping[str, Any]) -> str:
    """How `old` (earlier keywords and their values) is spelled now: `engine='dali'`,
    `resources=iofeed.Resources(prefetch=2, memory_budget=...)`, in the order first given."""
    now: dict[str, list[str]] = {}
    for name, value in old.items():
        keyword, field = RENAMED[name]
        now.setdefault(keyword, []).append(f"{field}={value!r}" if field else repr(value))
    return ", ".join(f"{keyword}=iofeed.{GROUPS[keyword].__name__}({', '.join(parts)})" if keyword in GROUPS
                     else f"{keyword}={parts[0]}" for keyword, parts in now.items())


def check_spellings(keywords: Mapping[str, Any], known: Collection[str]) -> None:
    """OptionError (one line) for an earlier spelling among `keywords`, naming its spelling now,
    else for a keyword that is not among `known`, naming the close matches."""
    old = {name: value for name, value in keywords.items() if name in RENAMED}
    if old:
        given = ", ".join(f"{name}={value!r}" for name, value in old.items())
        raise OptionError(f"loader({given}): {'that is' if len(old) == 1 else 'those are'} spelled "
                          f"{spelled_now(old)} now (one spelling per setting; see help(iofeed.loader))")
    for name, value in keywords.items():
        if name not in known:
            close = difflib.get_close_matches(name, list(known), n=3)
            hint = f"did you mean {' or '.join(close)}?" if close else "see help(iofeed.loader) for the options"
            raise OptionError(f"loader() got an unknown keyword {name}={value!r}: {hint}")
