"""`python -m helpers.keras_floats SOURCE OUT` with KERAS_BACKEND set: `framework="keras"` with a
recipe's mean/std and a sample transform returning 0-255 float32 (`transforms.downscale`), on the
host path and (torch backend) on the device path forced onto the CPU; per path the settings' and
the batches' facts, as JSON."""
from __future__ import annotations

import json
import sys

import numpy as np

from helpers.images import label_from_pixels
from helpers.transforms import downscale

SIZE = 32


def epoch(source: str) -> dict:
    """Shapes, dtypes, the largest value and whether the pixels say the labels, over one epoch."""
    import iofeed

    data = iofeed.loader(source, batch_size=4, image_size=SIZE, workers=1, seed=3, framework="keras",
                         augment=iofeed.Recipe(mean=(0.485, 0.456, 0.406), std=(0.229, 0.224, 0.225)),
                         transform=downscale)
    out: dict = {"batches": 0, "kinds": set(), "max": 0.0, "labels_ok": True}
    with data.iofeed_loader as loader:
        for images, labels in loader:  # the Loader yields what Keras is handed
            images, labels = np.asarray(images), np.asarray(labels)
            out["batches"] += 1
            out["kinds"].add(f"{images.dtype} {images.shape}")
            out["max"] = max(out["max"], float(images.max()))
            out["labels_ok"] &= [label_from_pixels(image) for image in images] == labels.tolist()
        out["normalise_on"] = loader.stats.settings["normalise_on"]
    out["kinds"] = sorted(out["kinds"])
    return out


def main(source: str, out: str) -> None:
    import keras

    result = {"backend": keras.backend.backend(), "host": epoch(source)}
    if result["backend"] == "torch":
        from iofeed.adapters import keras_torch

        keras_torch.training_device = lambda: "cpu"  # as Keras' "cuda" with a GPU: the device path, on the CPU
        result["device"] = epoch(source)
    with open(out, "w") as f:
        json.dump(result, f)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
