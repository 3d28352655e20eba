"""`python -m helpers.keras_pixels SOURCE OUT` with KERAS_BACKEND set: the val batches that Keras'
`fit` would be handed by `iofeed.loader(..., framework="keras", augment="uint8")`, as JSON: each
batch's dtype (Keras' name for it), pixels and labels."""
from __future__ import annotations

import json
import sys

import numpy as np

from helpers.keras_fit import SIZE


def main(source: str, out: str) -> None:
    import keras

    import iofeed

    batches = iofeed.loader(source, split="val", batch_size=4, image_size=SIZE, workers=1, framework="keras",
                            augment="uint8")
    backend = keras.backend.backend()
    with batches.iofeed_loader:
        feed = {"tensorflow": lambda: iter(batches), "jax": lambda: batches.get_jax_iterator(),
                "torch": lambda: iter(batches.get_torch_dataloader())}[backend]()
        seen = [(keras.backend.standardize_dtype(images.dtype), keras.ops.convert_to_numpy(images),
                 keras.ops.convert_to_numpy(labels)) for images, labels in feed]
    result = {"backend": backend, "dtypes": sorted({dtype for dtype, _, _ in seen}),
              "pixels": [np.asarray(images, np.float64).tolist() for _, images, _ in seen],
              "labels": [labels.tolist() for _, _, labels in seen]}
    with open(out, "w") as f:
        json.dump(result, f)


if __name__ == "__main__":
    main(*sys.argv[1:])
