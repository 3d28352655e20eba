"""`python -m helpers.keras_conventions SOURCE OUT` with KERAS_BACKEND set: what a Keras 3 script
meets on `framework="keras"` — the pixel scale of the defaults, a model that starts with
`Rescaling(1/255)`, batches trained per epoch, `take`/`repeat`, `batch_transform=` — as JSON."""
from __future__ import annotations

import json
import sys
import warnings

import numpy as np

SIZE = 32


def rescaling_model(classes: int = 4) -> object:
    """A model that scales its own input, as Keras examples do (0-255 in, 0-1 inside)."""
    import keras

    model = keras.Sequential([
        keras.Input((SIZE, SIZE, 3)),
        keras.layers.Rescaling(1.0 / 255),
        keras.layers.Conv2D(8, 3, activation="relu"),
        keras.layers.GlobalAveragePooling2D(),
        keras.layers.Dense(classes),
    ])
    model.compile(optimizer=keras.optimizers.Adam(1e-2),
                  loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True), metrics=["accuracy"])
    return model


def first_images(data: object) -> np.ndarray:
    """The images of the first batch, whatever `framework="keras"` returned on this backend."""
    batches = data.get_numpy_iterator() if hasattr(data, "get_numpy_iterator") else iter(data)
    images, _ = next(iter(batches))
    return np.asarray(images)


def zeroed(images, labels):
    """A batch transform whose effect shows: every pixel 0."""
    return images * 0, labels


def failing(images, labels):
    raise RuntimeError("batch transform ran and failed")


def fit_counting(model, data, **options) -> tuple[list[int], list[str]]:
    """Batches trained in each epoch, and the warnings of interest raised during the fit (Keras'
    "ran out of data", iofeed's about a model that rescales its input)."""
    import keras

    class Count(keras.callbacks.Callback):
        def __init__(self):
            super().__init__()
            self.per_epoch: list[int] = []

        def on_epoch_begin(self, epoch, logs=None):
            self.per_epoch.append(0)

        def on_train_batch_end(self, batch, logs=None):
            self.per_epoch[-1] += 1

    count = Count()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        model.fit(data, verbose=0, callbacks=[count], **options)
    return count.per_epoch, [str(w.message) for w in caught if any(k in str(w.message) for k in WATCHED)]


WATCHED = ("ran out of data", "starts with")


def main(source: str, out: str) -> None:
    import keras

    import iofeed

    keras.utils.set_random_seed(0)
    result: dict = {"backend": keras.backend.backend()}
    options = {"batch_size": 4, "image_size": SIZE, "workers": 1, "framework": "keras"}
    train = iofeed.loader(source, seed=11, **options)
    val = iofeed.loader(source, split="val", **options)
    loader = train.iofeed_loader
    with loader, val.iofeed_loader:
        pixels = first_images(train)
        result["pixels"] = [float(pixels.min()), float(pixels.max()), str(pixels.dtype)]
        result["len"] = len(loader)
        result["fit"] = fit_counting(rescaling_model(), train, epochs=2, validation_data=val)
        result["take"] = fit_counting(rescaling_model(), train.take(3), epochs=2)[0]
        loader.set_epoch(0)
        result["repeat"] = fit_counting(rescaling_model(), train.repeat(), epochs=2, steps_per_epoch=5)[0]
        loader.set_epoch(0)
        for images, labels in train.take(1):  # the Keras tutorial's first cell: look at a few images
            result["take1"] = [list(np.array(images[0]).astype("uint8").shape), int(labels[0]) in range(4)]
        flip = keras.layers.RandomFlip("horizontal")  # the tutorial's augmentation as a .map, AUTOTUNE (-1) as given
        mapped = train.map(lambda images, labels: (flip(images), labels), num_parallel_calls=-1).prefetch(-1)
        result["map"] = fit_counting(rescaling_model(), mapped, epochs=1)[0]
        result["skip"] = [len(list(train.skip(6))), len(list(train.take(5).skip(1).repeat(2)))]
        first = next(iter(train.as_numpy_iterator()))
        result["numpy"] = [type(first[0]).__name__, type(first[1]).__name__]
        try:
            train.shuffle(8)
            result["shuffle"] = "works"
        except AttributeError as exc:
            result["shuffle"] = str(exc)
    normalised = iofeed.Recipe(mean=(0.485, 0.456, 0.406), std=(0.229, 0.224, 0.225))
    explicit = iofeed.loader(source, augment=normalised, **options)
    with explicit.iofeed_loader:
        result["normalised"] = fit_counting(rescaling_model(), explicit, epochs=2)[1]
    zero = iofeed.loader(source, batch_transform=zeroed, **options)
    with zero.iofeed_loader:
        result["zeroed_max"] = float(np.abs(first_images(zero)).max())
    try:  # TensorFlow traces the transform when the dataset is made; the others call it per batch
        fail = iofeed.loader(source, batch_transform=failing, **options)
        with fail.iofeed_loader:
            rescaling_model().fit(fail, epochs=1, verbose=0)
        result["failing"] = "not noticed"
    except Exception as exc:  # noqa: BLE001 - any framework's wrapping of the transform's error
        result["failing"] = str(exc)[-300:]
    with open(out, "w") as f:
        json.dump(result, f)


if __name__ == "__main__":
    main(*sys.argv[1:])
