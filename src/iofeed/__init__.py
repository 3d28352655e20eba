"""iofeed: keep GPUs busy — prepare images once, load them fast, and prove it with a benchmark."""
from __future__ import annotations

__version__ = "0.1.0"

from .augment.recipe import PRESETS, Recipe  # noqa: E402
from .augment.timm_args import from_timm_args  # noqa: E402
from .augment.torchvision_args import from_torchvision_args  # noqa: E402
from .errors import IofeedError  # noqa: E402
from .loading.call import loader  # noqa: E402
from .loading.loader import Loader  # noqa: E402
from .options.groups import Cache, Order, Output, Placement, Resources, Skips  # noqa: E402
from .sources.mix import Mix  # noqa: E402

__all__ = ["PRESETS", "Cache", "IofeedError", "Loader", "Mix", "Order", "Output", "Placement", "Recipe", "Resources",
           "Skips", "__version__", "from_timm_args", "from_torchvision_args", "loader"]
