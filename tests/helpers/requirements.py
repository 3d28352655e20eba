"""Dependency markers: what each one needs, and why a test carrying it cannot run here."""
from __future__ import annotations

import importlib

MODULES = {
    "torch": "torch",
    "torchvision": "torchvision",
    "torchcodec": "torchcodec.decoders",
    "tf": "tensorflow",
    "dali": "nvidia.dali",
    "ray": "ray",
    "opencv": "cv2",
    "simplejpeg": "simplejpeg",
    "region": "nvidia.nvimgcodec",
    "matplotlib": "matplotlib",
    "pyarrow": "pyarrow",
    "datasets": "datasets",
    "albumentations": "albumentations",
    "jax": "jax",
    "keras": "keras",
    "grain": "grain",
    "timm": "timm",
    "mypy": "mypy.api",
}


def cuda_available() -> bool:
    """Whether PyTorch sees a CUDA GPU."""
    try:
        import torch
    except ImportError:
        return False
    return torch.cuda.is_available()


def missing(marker: str) -> str | None:
    """Why a test marked `marker` cannot run here (a missing dependency), or None when it can."""
    if marker == "gpu":
        return None if cuda_available() else "needs a CUDA GPU"
    module = MODULES.get(marker)
    if module is None:
        return None
    try:
        importlib.import_module(module)
    except ImportError as exc:
        return f"needs {module} ({exc})"
    return None
