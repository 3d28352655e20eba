"""`python -m helpers.keras_fit SOURCE OUT` with KERAS_BACKEND set: Keras 3 `fit` of a tiny model on
`iofeed.loader(..., framework="keras")` with validation data; the history and loader counts as JSON."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

SIZE = 32
TESTS = Path(__file__).resolve().parents[1]


def run_on_backend(module: str, source: Path, out: Path, backend: str) -> dict:
    """`python -m MODULE SOURCE OUT` in a process of its own with KERAS_BACKEND=`backend` (read when
    keras is first imported); the JSON it wrote."""
    path = os.pathsep.join([str(TESTS.parent / "src"), str(TESTS), os.environ.get("PYTHONPATH", "")])
    run = subprocess.run([sys.executable, "-m", module, str(source), str(out)], capture_output=True, text=True,
                         timeout=500, env={**os.environ, "PYTHONPATH": path, "KERAS_BACKEND": backend,
                                           "TF_CPP_MIN_LOG_LEVEL": "2"})
    assert run.returncode == 0, run.stderr[-3000:]
    return json.loads(out.read_text())


def tiny_classifier(size: int, classes: int = 4) -> object:
    """A compiled Keras model small enough to fit in seconds: images (size, size, 3) -> class logits."""
    import keras

    model = keras.Sequential([
        keras.Input((size, size, 3)),
        keras.layers.Conv2D(8, 3, activation="relu"),
        keras.layers.GlobalAveragePooling2D(),
        keras.layers.Dense(classes),
    ])
    model.compile(optimizer=keras.optimizers.Adam(1e-2),
                  loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    return model


def main(source: str, out: str) -> None:
    import keras

    import iofeed

    keras.utils.set_random_seed(0)
    train = iofeed.loader(source, batch_size=4, image_size=SIZE, workers=1, seed=11, framework="keras")
    val = iofeed.loader(source, split="val", batch_size=4, image_size=SIZE, workers=1, framework="keras")
    model = tiny_classifier(SIZE)
    with train.iofeed_loader as loader, val.iofeed_loader as val_loader:
        history = model.fit(train, epochs=2, validation_data=val, verbose=0)
        result = {"backend": keras.backend.backend(), "type": type(train).__name__, "history": history.history,
                  "epoch": loader.epoch, "images": loader.stats.images, "val_epoch": val_loader.epoch,
                  "val_images": val_loader.stats.images}
    with open(out, "w") as f:
        json.dump(result, f)


if __name__ == "__main__":
    main(*sys.argv[1:])
