"""The traced command as one printable line."""
from __future__ import annotations

import shlex


def command_text(command: list[str], width: int = 120) -> str:
    """The command on one line, shortened to `width` characters."""
    text = shlex.join(command).replace("\n", "\\n")
    return text if len(text) <= width else text[: width - 3] + "..."
