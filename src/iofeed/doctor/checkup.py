"""`Checkup`: everything `iofeed doctor` found, as data (run fills it, report and plot read it)."""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from .data import DataCheck
from .environment import Environment
from .finding import Finding
from .trace import Recording


@dataclass
class Checkup:
    """Everything `iofeed doctor` found; `data` and `recording` are None when not asked for."""

    environment: Environment
    data: DataCheck | None
    recording: Recording | None
    findings: list[Finding] = field(default_factory=list)  # from the trace
    files: list[Path] = field(default_factory=list)  # JSON and PNG written
