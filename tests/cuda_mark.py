"""`gpu`: skips a test without a CUDA GPU. Apart from conftest, which scripts run by the tests
import without wanting torch loaded."""
from __future__ import annotations

import pytest


def cuda_available() -> bool:
    """Whether PyTorch sees a CUDA GPU."""
    try:
        import torch
    except ImportError:
        return False
    return torch.cuda.is_available()


gpu = pytest.mark.skipif(not cuda_available(), reason="needs a CUDA GPU")
