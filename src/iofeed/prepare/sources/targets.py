"""Sample targets as a source reads them (class index, class name, a list of them, any JSON)
turned into class indices, multi-labels and extras, the same way for every source kind."""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from ...errors import SourceError
from ...format.targets import TARGET_KINDS

Value = int | str


def is_class(value: Any) -> bool:
    """Whether `value` names one class: an integer (not bool) or a string."""
    return isinstance(value, str) or (isinstance(value, int) and not isinstance(value, bool))


def missing(target: Any) -> bool:
    """Whether a sample's target is absent: None (JSON null, a null cell) or blank text (an empty
    CSV cell, an empty `txt`); such a sample is rejected with "no label", never made a class."""
    return target is None or (isinstance(target, str) and not target.strip())


def parse_cell(text: str) -> Any:
    """A label as written in a text cell: JSON when it reads as JSON (`[1, 2]`, `{"a": 1}`, `7`,
    `0.5`), else the text itself (a class name; `007` and `3a` stay text)."""
    text = text.strip()
    if text[:1] in '[{"-0123456789' or text in ("true", "false", "null"):
        try:
            return json.loads(text)
        except ValueError:
            return text
    return text


@dataclass
class Targets:
    """Targets collected sample by sample; `resolve()` fixes the class list and indices.

    A target is a class (int index or str name), a list of classes (multi-label), or any other
    JSON value (an extra without a class: a box, a caption, a score). `extra` is any JSON
    value a sample carries beside its target. Class names are sorted; integer labels are
    class indices as they are (names "0".."max"), unless `names` are given; beside class names,
    an integer is the class its digits name (`3` and `"3"` are one class).
    """

    names: list[str] | None = None  # known class names (Hugging Face ClassLabel, ...), index = position
    raw: list[Any] = field(default_factory=list)
    extras: list[Any] = field(default_factory=list)

    def add(self, target: Any, extra: Any = None) -> None:
        """Record one accepted sample's target and extra."""
        self.raw.append(target)
        self.extras.append(extra)

    @property
    def multi_label(self) -> bool:
        """Whether any sample has a list of classes."""
        return any(isinstance(t, list) for t in self.raw)

    @property
    def has_extras(self) -> bool:
        """Whether any sample carries an extra (or a target that is not a class)."""
        return any(e is not None for e in self.extras) or any(not _names_classes(t) and t is not None
                                                               for t in self.raw)

    def resolve(self) -> Resolved:
        """Class names, each sample's class indices, and each sample's extra."""
        values = [v for t in self.raw for v in _classes_of(t)]
        if self.names is not None:
            names = list(self.names)
        elif values and all(isinstance(v, int) for v in values):
            names = [str(i) for i in range(max(values) + 1)]
        else:
            names = sorted({str(v) for v in values})
        lookup = {name: i for i, name in enumerate(names)}
        classes: list[list[int]] = []
        for t in self.raw:
            indices = []
            for v in _classes_of(t):
                index = v if isinstance(v, int) and self.names is not None else lookup.get(str(v))
                if index is None or not 0 <= index < len(names):
                    raise SourceError(f"label {v!r} is not one of the {len(names)} classes "
                                      f"({', '.join(names[:5])}{', ...' if len(names) > 5 else ''})")
                indices.append(index)
            classes.append(sorted(set(indices)))
        extras = [e if _names_classes(t) or t is None else (t if e is None or e == t else {"target": t, **_as_dict(e)})
                  for t, e in zip(self.raw, self.extras)]
        return Resolved(names, classes, extras, self.multi_label, any(e is not None for e in extras))


def _names_classes(target: Any) -> bool:
    """Whether a target is a class or a list of classes (an empty list too: a multi-label sample
    with none), not another JSON value."""
    return is_class(target) or (isinstance(target, list) and all(is_class(v) for v in target))


def _classes_of(target: Any) -> list[Value]:
    """The classes a target names (none for a JSON value that is not a class)."""
    if is_class(target):
        return [target]
    return list(target) if _names_classes(target) else []


def _as_dict(extra: Any) -> dict:
    return extra if isinstance(extra, dict) else {"extra": extra}


@dataclass(frozen=True)
class Resolved:
    """Targets fixed: class names, per sample its sorted class indices (one for a single-label
    sample, none for one with only an extra) and its extra (None when it has none)."""

    names: list[str]
    classes: list[list[int]]
    extras: list[Any]
    multi_label: bool
    has_extras: bool

    @property
    def kind(self) -> str:
        """The dataset's targets kind (`format.targets.TARGET_KINDS`): class, multi_label or none."""
        return TARGET_KINDS[(self.multi_label, bool(self.names))]

    @property
    def side_file(self) -> bool:
        """Whether a split needs its targets file: its samples are not one class each, or carry extras."""
        return self.kind != "class" or self.has_extras

    def manifest_entry(self, files: dict[str, str]) -> dict[str, Any]:
        """The manifest's `targets` entry, given each split's targets file."""
        return {"kind": self.kind, "extras": self.has_extras, "files": files}

    def label(self, index: int) -> int:
        """The sample's class index for the table: its first class, -1 when it has none."""
        found = self.classes[index]
        return found[0] if found else -1
