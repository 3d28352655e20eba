"""A finding of `iofeed doctor`: what is wrong, the numbers that show it, and what to do."""
from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class Finding:
    """One diagnosis. `heuristic` marks a guess that the measurements cannot confirm."""

    code: str  # stable identifier, e.g. "data-starved"
    title: str
    evidence: list[str] = field(default_factory=list)
    advice: list[str] = field(default_factory=list)
    heuristic: bool = False
