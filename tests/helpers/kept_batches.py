"""`python -m helpers.kept_batches SOURCE OUT` with KERAS_BACKEND set: every batch of two epochs of
what Keras' `fit` iterates for `framework="keras"` kept in a list, each compared at the end with a
copy taken when it arrived; the counts as JSON."""
from __future__ import annotations

import json
import sys

import numpy as np


def main(source: str, out: str) -> None:
    import keras

    import iofeed

    batches = iofeed.loader(source, batch_size=4, image_size=32, workers=1, seed=2,
                            resources=iofeed.Resources(prefetch=2), framework="keras")
    with batches.iofeed_loader as ld:
        kept = []
        for _ in range(2):
            epoch = batches.get_jax_iterator() if keras.backend.backend() == "jax" else batches.get_torch_dataloader()
            for images, labels in epoch:
                kept.append((images, np.array(images), np.array(labels)))
        changed = sum(not np.array_equal(np.asarray(images), then) for images, then, _ in kept)
        result = {"backend": keras.backend.backend(), "kept": len(kept), "changed": changed,
                  "slots": ld.stats.settings["prefetch_batches"] + 1}
    with open(out, "w") as f:
        json.dump(result, f)


if __name__ == "__main__":
    main(*sys.argv[1:])
