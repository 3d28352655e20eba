"""Registries: named choices (engines, adapters, bench feeds) with declared capabilities, imported when chosen."""
from __future__ import annotations

import importlib
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from ..errors import MissingDependencyError, OptionError

Caps = TypeVar("Caps")


@dataclass(frozen=True)
class Entry(Generic[Caps]):
    """One choice: what it can do and needs (`caps`), and where it lives, imported only by `load()`.

    `target` is "package.module:attribute". `extra` is the pip extra that installs what that
    module imports (its framework), for the one-line error when it is missing.
    """

    target: str
    caps: Caps
    extra: str | None = None

    def load(self) -> Any:
        """The target object, importing its module (and so its framework) now."""
        module, _, attribute = self.target.partition(":")
        try:
            return getattr(importlib.import_module(module), attribute)
        except ModuleNotFoundError as exc:
            if self.extra is None or not exc.name or exc.name.split(".")[0] == "iofeed":
                raise
            raise MissingDependencyError(
                f"{exc.name} is not installed: run `pip install 'iofeed[{self.extra}]'`"
            ) from None


class Registry(Generic[Caps]):
    """The entries of one kind of choice (the option `kind` names), in order of preference."""

    def __init__(self, kind: str, entries: Mapping[str, Entry[Caps]]) -> None:
        self.kind = kind
        self._entries = dict(entries)

    def names(self) -> tuple[str, ...]:
        """Every name, in order of preference."""
        return tuple(self._entries)

    def __contains__(self, name: object) -> bool:
        return name in self._entries

    def __iter__(self) -> Iterator[tuple[str, Entry[Caps]]]:
        return iter(self._entries.items())

    def __getitem__(self, name: str) -> Entry[Caps]:
        """The entry called `name`; OptionError naming the choices when there is none."""
        try:
            return self._entries[name]
        except (KeyError, TypeError):
            raise OptionError(f"{self.kind}={name!r} is not one of {', '.join(self._entries)}") from None

    def caps(self, name: str) -> Caps:
        """The capabilities of `name` (nothing is imported)."""
        return self[name].caps

    def having(self, capability: str) -> tuple[str, ...]:
        """Names whose capabilities have `capability` set (true)."""
        return tuple(name for name, entry in self._entries.items() if getattr(entry.caps, capability))

    def having_value(self, capability: str, value: object) -> tuple[str, ...]:
        """Names whose capability `capability` (a collection) holds `value`."""
        return tuple(name for name, entry in self._entries.items() if value in getattr(entry.caps, capability))
