"""numpy adapter: uint8 NHWC images and int64 labels, without copying."""
from __future__ import annotations

import numpy as np

from ..backends.base import Batch


def to_numpy(batch: Batch) -> tuple[np.ndarray, np.ndarray]:
    """(images uint8 NHWC, labels int64). Views into shared memory: copy them to keep them past
    the next batch."""
    images = batch.images
    if not isinstance(images, np.ndarray):  # a GPU backend's batch (DALI with device="cuda")
        images = np.asarray(images.as_cpu())
    return images, batch.labels
