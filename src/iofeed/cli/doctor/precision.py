"""Whether a training command uses mixed precision, guessed from its Python code.

NVML cannot tell which number formats kernels use, so this reads text: the command's
arguments, the code of `python -c CODE`, or the script (a `*.py` argument, or `-m module`
found under the working directory) and the `*.py` files beside it.
"""
from __future__ import annotations

import os
import re
from pathlib import Path

from .finding import Finding

MARKERS = re.compile(r"autocast|GradScaler|bfloat16|float16|\bbf16\b|\bfp16\b|\.half\(|\bamp\b|"
                     r"mixed[_-]precision|16-mixed", re.IGNORECASE)
MAX_FILES = 50  # sibling files read at most
MAX_BYTES = 2**20  # bytes read per file at most


def mixed_precision_finding(command: list[str], cwd: Path | None = None) -> Finding | None:
    """A heuristic finding when the command's code shows no sign of mixed precision; None when
    it does, or when no Python code can be found to read."""
    cwd = cwd or Path.cwd()
    code = _code(command, cwd)
    if code is None:
        return None
    where, texts = code
    options = [arg for arg in command[1:] if not os.path.exists(os.path.join(cwd, arg))]
    if any(MARKERS.search(text) for text in [*options, *texts]):  # not paths: a folder may be named "amp"
        return None
    return Finding(
        "no-mixed-precision", "no sign of mixed precision in the training code",
        [f"no autocast, GradScaler, bfloat16/float16, bf16/fp16, amp or .half( in {where} "
         "nor in the command's arguments",
         "NVML cannot see the number format kernels run in: this is read from the code, not measured"],
        ["wrap forward and loss in `with torch.autocast('cuda', dtype=torch.bfloat16):` (Ampere "
         "and newer; float16 with torch.amp.GradScaler on older GPUs): about 2x the math throughput "
         "and half the activation memory, which leaves room for a larger batch"],
        heuristic=True)


def _code(command: list[str], cwd: Path) -> tuple[str, list[str]] | None:
    """(where, texts) of the Python code `command` runs, or None."""
    for i, arg in enumerate(command):
        following = command[i + 1] if i + 1 < len(command) else None
        if arg == "-c" and following is not None:
            return "the `-c` code", [following]
        if arg == "-m" and following is not None:
            base = cwd / following.replace(".", "/")
            script = next((p for p in (base.with_suffix(".py"), base / "__main__.py") if p.is_file()), None)
            if script:  # else a launcher module (torch.distributed.run): its script comes later
                return _script(script)
        if arg.endswith(".py") and (cwd / arg).is_file():
            return _script(cwd / arg)
    return None


def _script(path: Path) -> tuple[str, list[str]]:
    """The script's text and that of the `*.py` files beside it."""
    siblings = sorted(p for p in path.parent.glob("*.py") if p != path)[:MAX_FILES]
    texts = [_read(p) for p in (path, *siblings)]
    where = path.name + (f" and the {len(siblings)} .py files beside it" if siblings else "")
    return where, texts


def _read(path: Path) -> str:
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            return f.read(MAX_BYTES)
    except OSError:
        return ""
