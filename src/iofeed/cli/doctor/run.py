"""`iofeed doctor`: environment, then data, then the traced command, then the findings and files."""
from __future__ import annotations

import json
import os
import shutil
import tempfile
from dataclasses import replace
from pathlib import Path
from typing import Any

from ...errors import OptionError, require
from ...loading.stats_file import read_stats, stats_folder
from ...sources.remote.urls import is_url
from ...sources.samples import is_iofeed_dataset
from .checkup import Checkup
from .data import DataCheck, check_data
from .environment import check_environment
from .others import others_finding
from .patterns import diagnose, host_normalise_finding, transform_finding
from .plot import plot_timeline
from .report import to_dict
from .trace import record

LOADER_SPLIT = ("few-workers", "small-batch")  # findings that rest on training vs loader processes' CPU


def run_doctor(source: Path | None = None, command: list[str] | None = None, interval: float = 0.1,
               json_path: Path | None = None, plot_path: Path | None = None) -> Checkup:
    """Check the machine, the data at `source` and, while it runs, `command`; write the JSON to
    `json_path` and the timeline to `plot_path` (default: beside the JSON when a command ran)."""
    if command is not None:
        _check_runnable(command)
    if plot_path is not None and not command:
        raise OptionError("--plot needs a command to trace: iofeed doctor [SOURCE] --plot PATH -- COMMAND ...")
    if command and (plot_path is not None or json_path is not None):  # the timeline is drawn after the trace
        require("matplotlib", "doctor")
    environment = check_environment()
    data = check_data(source) if source is not None else None
    loaders: list[dict[str, Any]] = []
    recording = None
    if command:
        with tempfile.TemporaryDirectory(prefix="iofeed-doctor-") as scratch, stats_folder(Path(scratch)) as folder:
            recording = record(command, interval)  # iofeed loaders in the command write their stats to `folder`
            loaders = read_stats(folder)
    read = sources_read(loaders)
    if source is not None and read and str(Path(source).resolve()) not in read:
        data = _check_what_was_read(source, read, data)
    preprocessed = any(is_iofeed_dataset(Path(r)) for r in read if not is_url(r))
    trained_on = read[0] if read else (str(source) if source else None)
    findings = diagnose(recording.trace, command, trained_on, preprocessed) if recording else []
    transform = transform_finding(loaders)
    if transform is not None:
        findings.append(transform)
    host = host_normalise_finding(loaders, recording.trace.gpus) if recording else None
    if host is not None:
        findings.append(host)
    others = others_finding(recording.trace) if recording else None  # GPU or not: a shared machine's figures
    if others is not None:
        findings.append(others)
    if recording is not None:  # how trainers were told from loaders is evidence where the split decides
        findings = [replace(f, evidence=[*f.evidence, *recording.notes]) if f.code in LOADER_SPLIT else f
                    for f in findings]
    checkup = Checkup(environment, data, recording, findings)
    if json_path is not None:
        _write(json_path, json.dumps(to_dict(checkup), indent=1) + "\n")
        checkup.files.append(json_path)
        if plot_path is None and recording is not None:
            plot_path = json_path.with_suffix(".png")
    if plot_path is not None and recording is not None:
        plot_timeline(recording, findings, plot_path)
        checkup.files.append(plot_path)
    return checkup


def sources_read(loaders: list[dict[str, Any]]) -> list[str]:
    """The data the traced command's iofeed loaders read (as `samples.read_from` names it; each source
    of a mixture), in order."""
    read = [s["settings"]["source"] for s in loaders if s.get("settings", {}).get("source")]
    return list(dict.fromkeys(r for each in read for r in (each if isinstance(each, list) else [each])))


def _check_what_was_read(source: Path, read: list[str], checked: DataCheck | None) -> DataCheck | None:
    """The data check of what the command read instead of SOURCE (a path, not a URL, one that
    `check_data` takes), noting why; otherwise SOURCE's check, noting what the command read."""
    note = (f"the command's iofeed loader{'s' if len(read) > 1 else ''} read {', '.join(read)}, not {source}")
    local = [r for r in read if not is_url(r) and Path(r).exists()]
    if not local:
        if checked is not None:
            checked.notes.append(f"{note}: this check is of {source}, not of the data trained on")
        return checked
    data = check_data(Path(local[0]))
    data.notes.append(f"{note}: this check is of {local[0]}, the data trained on")
    return data


def _check_runnable(command: list[str]) -> None:
    """Fail before any check runs when the command cannot be started."""
    if not command:
        raise OptionError("empty command after `--` (e.g. iofeed doctor SRC -- python train.py)")
    program = command[0]
    if os.sep in program:
        if not (os.path.isfile(program) and os.access(program, os.X_OK)):
            raise OptionError(f"command not found or not executable: {program}")
    elif shutil.which(program) is None:
        raise OptionError(f"command not found: {program} (not on PATH)")


def _write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
