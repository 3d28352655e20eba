"""Sample targets as a source reads them (class index, class name, a list of them, any JSON)
turned into class indices, multi-labels and extras, the same way for every source kind.

The rules (docs/formats.md, "Labels"): a class is an integer index (an integral float such as
`2.0` is the integer it equals) or a name; a dataset's labels are all indices or all names (a mix
is refused, naming both); indices make the classes 0..max, bounded (`dense_limit`). A sample
whose label cannot be a class (a boolean, `1.5`, a negative index, an object among classes) is
rejected with the reason, never dropped or renumbered silently."""
from __future__ import annotations

import json
import math
import unicodedata
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any, cast

from ...errors import OptionError, SourceError
from ...format.targets import TARGET_KINDS
from .label_text import text_value

Value = int | str
DENSE_FLOOR = 1 << 16  # integer labels may make up to this many classes, however few are used
DENSE_FACTOR = 8  # ... or up to this multiple of the distinct integers used (sparse ids are refused)
NOT_A_CLASS = "label not a class"


def is_class(value: Any) -> bool:
    """Whether `value` names one class: an integer (not bool) or a string."""
    return isinstance(value, str) or (isinstance(value, int) and not isinstance(value, bool))


def dense_limit(distinct: int) -> int:
    """The most classes integer labels may make (0..max) when `distinct` integers are used."""
    return max(DENSE_FLOOR, DENSE_FACTOR * distinct)


@dataclass
class Targets:
    """Targets collected sample by sample; `check()` rejects those that cannot be classes and
    `resolve()` fixes the class list and indices.

    A target is a class (int index or str name), a list of classes (multi-label), or, where the
    source allows it (`json_targets`: a labels file, WebDataset `--label-column json`), any other
    JSON object or list (an extra without a class: a box, a caption) in a dataset without classes.
    `extra` is any JSON value a sample carries beside its target. Class names are sorted; integer
    labels are class indices as they are (names "0".."max"), unless `names` are given. `where`
    says where a sample's label is written (a labels file's line), for rejection reasons.
    """

    names: list[str] | None = None  # known class names (Hugging Face ClassLabel, ...), index = position
    json_targets: bool = False
    raw: list[Any] = field(default_factory=list)  # each target as the rules read it (`_normal`)
    written: list[Any] = field(default_factory=list)  # ... and as the source gave it (`as_names`)
    extras: list[Any] = field(default_factory=list)
    where: list[str | None] = field(default_factory=list)

    def add(self, target: Any, extra: Any = None, where: str | None = None) -> None:
        """Record one accepted sample's target and extra."""
        self.written.append(target)
        self.raw.append(self._normal(target))
        self.extras.append(extra)
        self.where.append(where)

    def as_names(self) -> None:
        """Every label as a class name, as written (`true`, `1.5`, `5000000`; text kept as it is:
        `1.0`, `+1` and `1` are three classes), as `--label-names` asks; OptionError beside known
        class names (a ClassLabel's)."""
        if self.names is not None:
            raise OptionError("--label-names: the labels have class names already (a ClassLabel): leave it out")
        self.raw = [_as_name(t) for t in self.written]

    def keep(self, indices: list[int]) -> None:
        """Keep only the samples at `indices` (in that order)."""
        self.raw, self.written, self.extras, self.where = (
            [values[i] for i in indices] for values in (self.raw, self.written, self.extras, self.where))

    @property
    def multi_label(self) -> bool:
        """Whether any sample has a list of classes."""
        return any(isinstance(t, list) for t in self.raw)

    @property
    def has_extras(self) -> bool:
        """Whether any sample carries an extra (or a target that is not a class)."""
        return any(e is not None for e in self.extras) or any(not _names_classes(t) and t is not None
                                                               for t in self.raw)

    def check(self, samples: list[str] | None = None) -> dict[int, str]:
        """{sample index: rejection reason} of the samples whose target cannot be stored. Raises
        SourceError, naming values and `samples` (each sample's printable name), when the targets
        together make no class list: indices mixed with names, or too many classes."""
        def name(i: int) -> str:
            return samples[i] if samples is not None else f"sample {i}"

        bad = {i: reason for i, t in enumerate(self.raw) if (reason := self._scalar_reason(t))}
        classed = any(_names_classes(t) for i, t in enumerate(self.raw) if i not in bad)
        for i, t in enumerate(self.raw):
            if i not in bad and t is not None and not _names_classes(t) and (classed or not self.json_targets):
                why = "other samples have classes" if classed else "the label must be a class index or name"
                bad[i] = f"{NOT_A_CLASS} ({_show(t)}: {why})"
        first: dict[Value, int] = {}
        for i, t in enumerate(self.raw):
            for v in _classes_of(t) if i not in bad else ():
                first.setdefault(v, i)
        if self.names is not None:
            known = set(self.names)
            shown = ", ".join(self.names[:5]) + (", ..." if len(self.names) > 5 else "")
            for i, t in enumerate(self.raw):
                unknown = [v for v in _classes_of(t) if v not in known
                           and not (isinstance(v, int) and 0 <= v < len(self.names))] if i not in bad else []
                if unknown:
                    bad[i] = f"label not one of the classes ({unknown[0]!r}; the {len(self.names)} classes: {shown})"
        else:
            _check_values(first, name)
        return {i: self._at(i, reason) for i, reason in sorted(bad.items())}

    def _normal(self, target: Any) -> Any:
        """An integral float as the integer it equals (pandas makes float64 of an int column with a
        NaN), and without known names, text as the one text rule reads it (`label_text`: `+3`,
        `03`, `3.0` are 3, `true` a boolean); a list of labels alike. Any other value is kept as
        it is (an extra, a list of objects, is never changed)."""
        if isinstance(target, list):
            scalars = all(not isinstance(v, (dict, list)) for v in target)
            return [self._normal(v) for v in target] if scalars else target
        if isinstance(target, Decimal):  # a Parquet decimal column
            target = int(target) if target.is_finite() and target == target.to_integral_value() else float(target)
        if isinstance(target, float) and math.isfinite(target) and target.is_integer():
            return int(target)
        if self.names is None and isinstance(target, str):
            return text_value(target)
        return target

    def _scalar_reason(self, target: Any) -> str | None:
        """Why a target (or an item of its list) cannot be a class: a boolean, a number that is not
        an integer, a negative index; None when it can (or is another JSON value)."""
        for v in target if isinstance(target, list) else [target]:
            if isinstance(v, bool):
                return (f"{NOT_A_CLASS} ({json.dumps(v)} is a boolean: write the classes as 0/1 or as names, or "
                        "pass --label-names)")
            if isinstance(v, (float, Decimal)):
                return f"{NOT_A_CLASS} ({v if isinstance(v, Decimal) else repr(v)} is not an integer class index)"
            if isinstance(v, int) and v < 0 and self.names is None:
                return f"{NOT_A_CLASS} ({v} is negative: class indices start at 0)"
        return None

    def _at(self, index: int, reason: str) -> str:
        """`reason` with where the sample's label is written, when known."""
        where = self.where[index] if index < len(self.where) else None
        return f"{reason[:-1]}; {where})" if where and reason.endswith(")") else reason

    def resolve(self) -> Resolved:
        """Class names, each sample's class indices, and each sample's extra."""
        bad = self.check()
        if bad:  # the sources move these to their rejections first (`SourceScan.settle`)
            index, reason = next(iter(bad.items()))
            raise SourceError(f"sample {index}: {reason}")
        values = [v for t in self.raw for v in _classes_of(t)]
        if self.names is not None:
            names = list(self.names)
        elif values and all(isinstance(v, int) for v in values):
            names = [str(i) for i in range(max(cast("list[int]", values)) + 1)]  # all ints: checked above
        else:
            names = sorted({str(v) for v in values})
        lookup = {name: i for i, name in enumerate(names)}
        classes: list[list[int]] = []
        for t in self.raw:
            indices = []
            for v in _classes_of(t):
                index = v if isinstance(v, int) and self.names is not None else lookup[str(v)]  # check(): all known
                indices.append(index)
            classes.append(sorted(set(indices)))
        extras = [e if _names_classes(t) or t is None else (t if e is None or e == t else {"target": t, **_as_dict(e)})
                  for t, e in zip(self.raw, self.extras)]
        return Resolved(names, classes, extras, self.multi_label, any(e is not None for e in extras))


def _check_values(first: dict[Value, int], name: Callable[[int], str]) -> None:
    """SourceError when class values (each with its first sample) make no class list: indices
    mixed with names (sorted as text, indices would be renumbered), or indices past `dense_limit`."""
    ints = sorted(v for v in first if isinstance(v, int))
    texts = sorted(v for v in first if isinstance(v, str))
    if ints and texts:
        raise SourceError(f"labels mix class indices ({_few(ints)}) and class names ({_few(texts)}), e.g. "
                          f"{name(first[ints[0]])}: {ints[0]} and {name(first[texts[0]])}: {texts[0]!r}: give "
                          "every sample an index or every sample a name (--label-names: every label a name)")
    normal: dict[str, str] = {}
    for text in texts:
        other = normal.setdefault(unicodedata.normalize("NFC", text), text)
        if other != text:
            raise SourceError(f"class names {ascii(other)} ({name(first[other])}) and {ascii(text)} "
                              f"({name(first[text])}) differ only in Unicode normalisation (NFC/NFD): they would be "
                              "two classes printed the same; write them alike")
    if ints and ints[-1] + 1 > dense_limit(len(ints)):
        raise SourceError(f"label {ints[-1]} ({name(first[ints[-1]])}) would make {ints[-1] + 1:,} classes for "
                          f"{len(ints)} distinct labels: integer labels are class indices 0..max, at most "
                          f"{dense_limit(len(ints)):,} classes here; renumber the labels 0..N-1, or pass "
                          "--label-names to take them as names")


def _as_name(target: Any) -> Any:
    """A label (or a list of them) as class-name text, as written: text stripped and nothing
    else (`1.0`, `+1`, `03` stay themselves), a number or boolean as JSON writes it; an object
    or a list of them as it is."""
    if isinstance(target, list):
        return [_as_name(v) for v in target] if all(not isinstance(v, (dict, list)) for v in target) else target
    if isinstance(target, (bool, float)):
        return json.dumps(target) if isinstance(target, bool) else repr(target)
    if isinstance(target, str):
        return target.strip()
    return str(target) if isinstance(target, (int, Decimal)) else target


def _few(values: Sequence[Value]) -> str:
    return ", ".join(repr(v) for v in values[:3]) + (", ..." if len(values) > 3 else "")


def _show(target: Any) -> str:
    """A label as a reason shows it: JSON, or a value JSON has no type for with its type (`date 1970-01-01`)."""
    if not isinstance(target, (dict, list, str, int, float, type(None))):
        return f"{type(target).__name__} {str(target)[:30]}"
    text = json.dumps(target, default=str)
    return text if len(text) <= 40 else text[:37] + "..."


def _names_classes(target: Any) -> bool:
    """Whether a target is a class or a list of classes (an empty list too: a multi-label sample
    with none), not another JSON value."""
    return is_class(target) or (isinstance(target, list) and all(is_class(v) for v in target))


def _classes_of(target: Any) -> list[Value]:
    """The classes a target names (none for a JSON value that is not a class)."""
    if is_class(target):
        return [target]
    return list(target) if _names_classes(target) else []


def _as_dict(extra: Any) -> dict[str, Any]:
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
