"""One warning when a Keras model that scales its own input (a leading `Rescaling` or
`Normalization` layer) is fed images iofeed has already normalised: it then trains on inputs of
about ±0.01 with no error."""
from __future__ import annotations

import sys
import warnings
import weakref
from types import FrameType
from typing import Any

from .normalize import PIXELS_AFFINE, options_affine

_warned: weakref.WeakSet[Any] = weakref.WeakSet()  # loaders already warned about (or found fine)
DEPTH = 40  # frames looked through for the Keras model whose fit/evaluate asks for the data


def check_model_input(loader: Any) -> None:
    """Warn once per loader when the Keras model calling for its batches (found up the call
    stack: `fit`, `evaluate` and `predict` run as the model's methods) starts with a Rescaling or
    Normalization layer while the loader hands out normalised images rather than 0-255 pixels."""
    keras = sys.modules.get("keras")
    affine = options_affine(loader.options)
    if keras is None or loader in _warned or affine is None or affine == PIXELS_AFFINE:
        return
    model = _calling_model(keras)
    if model is None:
        return
    _warned.add(loader)
    layer = _first_layer(keras, model)
    if isinstance(layer, (keras.layers.Rescaling, keras.layers.Normalization)):
        warnings.warn(f"model {model.name!r} starts with {type(layer).__name__} ({layer.name!r}), which expects "
                      "0-255 pixels, but iofeed hands it images already normalised by the recipe's mean/std: drop "
                      "mean=/std= from the Recipe (framework='keras' then gives float32 0-255, as "
                      "image_dataset_from_directory does), or remove the layer", UserWarning, stacklevel=2)


def _calling_model(keras: Any) -> Any:
    frame: FrameType | None = sys._getframe(2)
    for _ in range(DEPTH):
        if frame is None:
            return None
        owner = frame.f_locals.get("self")
        if isinstance(owner, keras.Model):
            return owner
        frame = frame.f_back
    return None


def _first_layer(keras: Any, model: Any) -> Any:
    """The model's first layer past its inputs, looking into a leading nested model (a
    `Sequential` of preprocessing layers)."""
    layers = [layer for layer in getattr(model, "layers", []) if not isinstance(layer, keras.layers.InputLayer)]
    if not layers:
        return None
    first = layers[0]
    return _first_layer(keras, first) if isinstance(first, keras.Model) else first
