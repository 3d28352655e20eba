"""The checks every loader option shares: integers with a floor, flags, names from a list, and
the readable repr of an options object (only what differs from the default)."""
from __future__ import annotations

import dataclasses
import numbers
from typing import Any

from ..errors import OptionError


def integer(name: str, value: Any, minimum: int, optional: bool = False) -> int | None:
    """`value` as an int >= `minimum` (numpy integers kept as int; booleans are not integers), or
    None when `optional`; OptionError naming `name` otherwise."""
    if value is None and optional:
        return None
    if not isinstance(value, numbers.Integral) or isinstance(value, bool):
        kind = "an int" + (" or None" if optional else "")
        raise OptionError(f"{name} must be {kind}, got {value!r} ({type(value).__name__})")
    if value < minimum:
        raise OptionError(f"{name} must be >= {minimum}, got {value}")
    return int(value)


def flag(name: str, value: Any, optional: bool = False) -> None:
    """OptionError unless `value` is True or False (or None when `optional`)."""
    if not (isinstance(value, bool) or (value is None and optional)):
        raise OptionError(f"{name} must be True or False{' (or None)' if optional else ''}, got {value!r}")


def one_of(name: str, value: object, allowed: tuple[str, ...]) -> None:
    """OptionError unless `value` is one of the names `allowed`."""
    if not isinstance(value, str) or value not in allowed:
        raise OptionError(f"{name}={value!r} is not one of {', '.join(allowed)}")


def either(names: tuple[str, ...]) -> str:
    """'a' or 'a' or 'b' ..., for messages."""
    return " or ".join(repr(n) for n in names)


def changed_fields(options: Any) -> dict[str, Any]:
    """The init fields of the dataclass `options` that differ from their defaults (all required ones)."""
    changed = {}
    for f in dataclasses.fields(options):
        if not f.init:
            continue
        value = getattr(options, f.name)
        if f.default is not dataclasses.MISSING:
            default = f.default
        elif f.default_factory is not dataclasses.MISSING:
            default = f.default_factory()
        else:
            changed[f.name] = value
            continue
        if type(value) is not type(default) or value != default:
            changed[f.name] = value
    return changed


def short_repr(options: Any) -> str:
    """`Name(field=value, ...)` with only the fields that differ from the default: `Order(block_shards=3)`."""
    shown = ", ".join(f"{name}={value!r}" for name, value in changed_fields(options).items())
    return f"{type(options).__name__}({shown})"
