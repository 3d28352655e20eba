"""NVIDIA DALI as iofeed needs it: which version is installed, whether it imports, and the oldest
one the `dali` engine accepts.

The engine hands DALI the consumer's CUDA stream (`pipe.run(stream)`), so that batches are bound
to it without a host sync and freed in its order. DALI honours that stream with its dynamic
executor only; `exec_dynamic=` and the zero-copy outputs bound to a stream both came with DALI
1.44 (its release notes: "exec_dynamic is no longer experimental", "zero-copy outputs transfer
with dynamic executor"). An older DALI would build no pipeline, or return host-synchronous
outputs freed before queued kernels read them; it is refused in one line instead.
"""
from __future__ import annotations

import importlib
import importlib.metadata
import re
from typing import Any

from ...errors import MissingDependencyError, require

DALI_FLOOR = (1, 44)  # the first DALI whose Pipeline takes `exec_dynamic=` and binds run()'s outputs to a stream


def dali_version() -> str | None:
    """The installed DALI's version, whichever CUDA flavour (`nvidia-dali-cuda120`, ...); None: absent."""
    for dist in importlib.metadata.distributions():
        if (dist.metadata["Name"] or "").startswith("nvidia-dali"):
            return dist.version
    return None


def dali_import_status() -> str:
    """"ok" when `nvidia.dali` imports, else the reason."""
    try:
        importlib.import_module("nvidia.dali")
    except Exception as exc:  # noqa: BLE001 - a broken DALI raises all sorts of errors
        return f"{type(exc).__name__}: {exc}".splitlines()[0]
    return "ok"


def release(version: str) -> tuple[int, int]:
    """(major, minor) of a version string such as "1.43.0" or "2.4.0.dev20260101" ((0, 0): unreadable)."""
    match = re.match(r"(\d+)\.(\d+)", version)
    return (int(match[1]), int(match[2])) if match else (0, 0)


def require_dali() -> Any:
    """The `nvidia.dali` module, at least `DALI_FLOOR`; MissingDependencyError (one line, naming the
    installed version and the fix) when it is missing or older."""
    dali = require("nvidia.dali", "dali")
    version = str(getattr(dali, "__version__", "") or dali_version() or "unknown")
    if release(version) < DALI_FLOOR:
        floor = ".".join(map(str, DALI_FLOOR))
        raise MissingDependencyError(
            f"NVIDIA DALI {version} is installed; engine='dali' needs DALI >= {floor} (its dynamic executor binds "
            f"batches to the training stream): run `pip install -U 'iofeed[dali]'`, or use engine='workers'")
    return dali
