"""Labels as sources write them, before any class rule: a missing value (None, NaN, blank text),
a text cell (JSON when it reads as JSON, else a class name) and a WebDataset label member
(`cls` numbers however written, `txt` names, bytes that are not UTF-8 refused)."""
from __future__ import annotations

import json
import math
import re
from typing import Any

from .label_targets import NOT_A_CLASS

_INTEGER = re.compile(r"[+-]?[0-9]{1,4000}")  # int() refuses more than 4300 digits
_NUMBER = re.compile(r"[+-]?([0-9]+\.?[0-9]*|\.[0-9]+)([eE][+-]?[0-9]+)?")


def missing(target: Any) -> bool:
    """Whether a sample's target is absent: None (JSON null, a null cell), NaN (pandas' missing
    value) or blank text (an empty CSV cell, an empty `txt`); such a sample is rejected with
    "no label", never made a class."""
    return (target is None or (isinstance(target, float) and math.isnan(target))
            or (isinstance(target, str) and not target.strip()))


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


def member_label(data: bytes, ext: str) -> Any:
    """The label of a WebDataset member: a `cls` number is the integer it equals however written
    (`+1`, `1.0`, `1e0`), `txt` is a class name, another member (`--label-column`) a cell
    (`parse_cell`). ValueError (the rejection reason) when the bytes are not UTF-8: a replacement
    character would make a new class."""
    try:  # utf-8-sig: a byte-order mark (Windows tools write one) would make `3` the name "\ufeff3"
        text = data.decode("utf-8-sig").strip()
    except UnicodeDecodeError:
        raise ValueError(f"{NOT_A_CLASS} (its {ext} member is not UTF-8 text)") from None
    if ext == "cls" and _INTEGER.fullmatch(text):
        return int(text)
    if ext == "cls" and _NUMBER.fullmatch(text):
        return float(text)
    return (text or None) if ext in ("cls", "txt") else parse_cell(text)
