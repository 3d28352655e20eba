"""`python -m helpers.keras_doc WORKDIR OUT` with KERAS_BACKEND set: docs/frameworks/keras.md's
lines as written on a stand-in of the example's `PetImages/` (Cat and Dog folders whose pixels say
their class), with its `data_augmentation`, then a model that starts with `Rescaling(1/255)`
fitted on them; what came out, as JSON."""
from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import numpy as np


def main(workdir: str, out: str) -> None:
    import keras
    from keras import layers
    from tensorflow import data as tf_data

    import iofeed
    from helpers.framework_docs import classes_of, iofeed_blocks, make_class_folders, run_bash, run_python

    work = Path(workdir)
    make_class_folders(work / "PetImages", ["Cat", "Dog"], 12, size=(200, 180))
    (_, bash), (_, lines) = iofeed_blocks("keras", "What the example does, and the lines to change")
    run_bash(bash, work)
    data_augmentation_layers = [layers.RandomFlip("horizontal"), layers.RandomRotation(0.1)]

    def data_augmentation(images):  # the example's, as it defines it
        for layer in data_augmentation_layers:
            images = layer(images)
        return images

    ns = {"iofeed": iofeed, "keras": keras, "tf_data": tf_data, "batch_size": 8, "image_size": (180, 180),
          "data_augmentation": data_augmentation}
    os.chdir(work)
    run_python(lines, ns, "keras.md")
    train_ds, val_ds = ns["train_ds"], ns["val_ds"]
    model = keras.Sequential([keras.Input((180, 180, 3)), layers.Rescaling(1.0 / 255),
                              layers.Conv2D(4, 3, strides=8, activation="relu"), layers.GlobalAveragePooling2D(),
                              layers.Dense(2)])
    model.compile(optimizer="adam", loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    history = model.fit(train_ds, epochs=2, validation_data=val_ds, verbose=0)
    seen, match, top = 0, True, 0.0
    for images, labels in val_ds:
        images, labels = np.asarray(images), np.asarray(labels)
        match &= bool((classes_of(images, 2) == labels).all())
        seen, top = seen + len(labels), max(top, float(images.max()))
    result = {"epochs": len(history.history["loss"]), "val_seen": seen, "labels_match": match, "max_pixel": top,
              "val_samples": len(val_ds.iofeed_loader.dataset)}
    train_ds.iofeed_loader.close()
    val_ds.iofeed_loader.close()
    Path(out).write_text(json.dumps(result))


if __name__ == "__main__":
    main(*sys.argv[1:])
