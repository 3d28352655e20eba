"""`python -m helpers.keras_device SOURCE OUT` with KERAS_BACKEND=torch: `framework="keras"` on the
host path and on the device path (Keras' device forced to "cpu", as "cuda" would be with a GPU),
batch by batch (each batch kept to the end of the epoch), then a short `fit` on the device path; as JSON."""
from __future__ import annotations

import json
import sys

import numpy as np

from helpers.images import label_from_pixels

SIZE = 32
MEAN = (0.485, 0.456, 0.406)
STD = (0.229, 0.224, 0.225)


def epoch(source: str, **options) -> tuple[dict, list[np.ndarray], str | None]:
    """One epoch of `framework="keras"` normalised with MEAN/STD: labels, what each batch is, the
    labels its pixels say; the images; and `stats.settings["normalise_on"]`."""
    import iofeed

    data = iofeed.loader(source, batch_size=4, image_size=SIZE, workers=1, seed=3, framework="keras",
                         augment=iofeed.Recipe(mean=MEAN, std=STD), **options)
    out: dict = {"labels": [], "types": set(), "pixel_labels": []}
    images_seen, kept = [], []
    with data.iofeed_loader as loader:
        for images, labels in loader:
            out["labels"].append(labels.tolist())
            out["types"].add(f"{images.dtype} {images.device} {tuple(images.shape)}")
            pixels = (images.numpy() * np.array(STD) + np.array(MEAN)) * 255.0
            out["pixel_labels"].append([label_from_pixels(image) for image in pixels])
            images_seen.append(images.numpy().copy())
            kept.append(images)  # held past the engine's slots: must not change
        out["changed"] = sum(not np.array_equal(images.numpy(), then) for images, then in zip(kept, images_seen))
        where = loader.stats.settings.get("normalise_on")
    out["types"] = sorted(out["types"])
    return out, images_seen, where


def main(source: str, out: str) -> None:
    import keras

    import iofeed
    from helpers.keras_fit import tiny_classifier
    from iofeed.adapters import keras_torch

    host, host_images, host_where = epoch(source)
    keras_torch.training_device = lambda: "cpu"  # as Keras' "cuda" with a GPU: the device path, here on the CPU
    device, device_images, device_where = epoch(source)
    device["max_difference"] = max(float(np.abs(a - b).max()) for a, b in zip(host_images, device_images))
    keras.utils.set_random_seed(0)
    train = iofeed.loader(source, batch_size=4, image_size=SIZE, workers=1, seed=11, framework="keras")
    with train.iofeed_loader:
        history = tiny_classifier(SIZE).fit(train.take(3), epochs=1, verbose=0)
        steps = history.params.get("steps")
    result = {"backend": keras.backend.backend(), "host": host, "device": device,
              "normalise_on": [host_where, device_where], "fit_steps": steps, "fit_loss": history.history["loss"]}
    with open(out, "w") as f:
        json.dump(result, f)


if __name__ == "__main__":
    main(*sys.argv[1:])
