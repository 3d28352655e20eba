"""Labels as sources write them, before any class rule: a missing value (None, NaN, blank or
`nan` text), a text cell (a JSON list, object or string read as JSON, other text kept as written
for the one text rule, `label_text`) and a WebDataset label member (`cls` and `txt` text as
written, bytes that are not UTF-8 refused)."""
from __future__ import annotations

import json
import math
from typing import Any

from .label_targets import NOT_A_CLASS
from .label_text import missing_text


def missing(target: Any) -> bool:
    """Whether a sample's target is absent: None (JSON null, a null cell), NaN (pandas' missing
    value) or text saying so (blank: an empty CSV cell or `txt`; `nan`, `NaN`, `null`); such a
    sample is rejected with "no label", never made a class, with or without --label-names."""
    return (target is None or (isinstance(target, float) and math.isnan(target))
            or (isinstance(target, str) and missing_text(target)))


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


def label_cell(text: str) -> Any:
    """A label as written in a text cell (a CSV cell, a plain line's field): a JSON list or object
    (`[1, 2]`: several classes) or a quoted JSON string read as JSON, any other text kept as
    written. The one text rule (`label_text`) reads it later, or `--label-names` keeps it, so
    `1.0`, `+1` and `1` are one class index, or three names, never two."""
    text = text.strip()
    if text[:1] in '[{"':
        try:
            return json.loads(text)
        except ValueError:
            return text
    return text


def member_label(data: bytes, ext: str) -> Any:
    """The label of a WebDataset member: `cls` and `txt` text as written (the one text rule reads
    it: `+1`, `1.0`, `1e0` are 1 in either; None when blank), another member (`--label-column`) a
    cell (`label_cell`). ValueError (the rejection reason) when the bytes are not UTF-8: a
    replacement character would make a new class."""
    try:  # utf-8-sig: a byte-order mark (Windows tools write one) would make `3` the name "\ufeff3"
        text = data.decode("utf-8-sig").strip()
    except UnicodeDecodeError:
        raise ValueError(f"{NOT_A_CLASS} (its {ext} member is not UTF-8 text)") from None
    return (text or None) if ext in ("cls", "txt") else label_cell(text)
