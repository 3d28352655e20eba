"""A batch's caption token ids in the framework's form: the workers' rows padded into int64
(batch, longest) ids with zeros after each row and int64 (batch,) lengths; torch tensors on the
loader's device for torch, numpy arrays otherwise (JAX takes them as they are, and keeps int64
only under `jax_enable_x64`)."""
from __future__ import annotations

from typing import Any

import numpy as np

from ..augment.tokenizer import padded


def caption_tokens(tokens: tuple[np.ndarray, np.ndarray] | None, framework: str, device: str) -> tuple[Any, Any]:
    """(ids, lengths) of a batch's packed token rows (`Batch.tokens`; an empty batch has none)."""
    ids, lengths = padded(tokens)
    if framework != "torch":
        return ids, lengths
    import torch

    return (torch.from_numpy(ids).to(device, non_blocking=True),
            torch.from_numpy(lengths).to(device, non_blocking=True))
