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

    def exit_status(self) -> int:
        """`iofeed doctor`'s exit status: the traced command's, as a shell gives it (128 + N after
        signal N, 130 after Ctrl-C); 0 without a command."""
        rec = self.recording
        if rec is None:
            return 0
        if rec.interrupted:
            return 130
        return 128 - rec.exit_code if rec.exit_code < 0 else rec.exit_code
