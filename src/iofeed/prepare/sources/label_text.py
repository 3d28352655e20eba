"""One rule per label spelling: what a label written as text means, the same for every source
(a labels-file cell or line, a JSON string, a string column, a WebDataset `cls` or `txt` member).

docs/formats.md, "Labels": blank text, `nan` and `null` are no label; a number however it is
written (`3`, `+3`, `03`, `3.0`, `3e0`) is that number, so an integral one is a class index and
any other (`1.5`, `inf`) is not a class; `true` / `false` (any case) are booleans, not classes;
any other text is a class name. `--label-names` keeps every text as written instead."""
from __future__ import annotations

import re
from decimal import Decimal

_NUMBER = re.compile(r"[+-]?([0-9]+\.?[0-9]*|\.[0-9]+)([eE][+-]?[0-9]+)?")
_INFINITY = re.compile(r"[+-]?(inf|infinity)", re.IGNORECASE)
_MISSING = re.compile(r"[+-]?nan|null|", re.IGNORECASE)
_BOOLEANS = {"true": True, "false": False}
MAX_DIGITS = 4000  # past this an integer is taken as infinite (int() refuses more than 4300 digits)


def missing_text(text: str) -> bool:
    """Whether a label written as text says "no label": blank, `nan` (any case: pandas writes
    `NaN` for a missing value) or `null`."""
    return _MISSING.fullmatch(text.strip()) is not None


def text_value(text: str) -> int | bool | str | float | Decimal:
    """The label `text` means: an int for an integral number however written, a bool for
    `true`/`false`, the stripped text for a class name; a float (infinite) or a Decimal (not
    integral: `1.5`, `3.0000000000000001`) for a number that is no class index."""
    text = text.strip()
    if _NUMBER.fullmatch(text):
        number = Decimal(text)
        if number.adjusted() > MAX_DIGITS:
            return float(number)  # inf: no class list could hold it
        return int(number) if number == number.to_integral_value() else number
    if _INFINITY.fullmatch(text):
        return float(text)
    return _BOOLEANS.get(text.lower(), text)
