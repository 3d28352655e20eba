"""`Recipe(fit=...)` against the target and the engine: the fitted geometry (scale jitter, window,
padding) is a detection step the workers engine does, recorded so that boxes and masks follow."""
from __future__ import annotations

from ..errors import OptionError
from .checks import either
from .engine_choices import AUTO, ENGINES

TARGETS = ("boxes", "masks")


def check_fit(fit: str, target: str, engine: str) -> None:
    """OptionError in one line naming `fit` when the target or the engine cannot take it."""
    if fit == "crop":
        return
    if target not in TARGETS:
        raise OptionError(f"Recipe fit={fit!r} places a detection image (its boxes and masks follow) and "
                          f"Output.target={target!r} has none: use Output(target='boxes' or 'masks'), or "
                          "fit='crop' (the random-resized crop) for classification")
    if engine != AUTO and not ENGINES.caps(engine).targets:
        raise OptionError(f"Recipe fit={fit!r}: engine={engine!r} cannot scale, window and pad an image with its "
                          f"boxes; use engine={either((AUTO, *ENGINES.having('targets')))}")
