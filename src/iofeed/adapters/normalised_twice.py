"""One warning per loader when its images get normalised a second time where iofeed can see it: a
Keras model that scales its own input (a leading `Rescaling` or `Normalization` layer), a torch
model or LightningModule holding a `Normalize`, a `Normalize` in `batch_transform=`, or a batch
transform whose output lies far outside what iofeed's own normalisation gives. Each trains on
inputs of about ±10 (or ±0.01) with no error."""
from __future__ import annotations

import sys
import warnings
import weakref
from collections.abc import Callable, Iterator
from types import FrameType
from typing import Any

from .normalize import PIXELS_AFFINE, Affine, normalises, options_affine

_warned: weakref.WeakSet[Any] = weakref.WeakSet()  # loaders already warned about (or whose Keras model was found fine)
DEPTH = 40  # frames looked through for the model whose fit/evaluate (or training step) asks for the data
NORMALIZERS = ("Normalize", "Normalization")  # torchvision v1/v2, kornia, albumentations; Keras' layer
MAX_NESTING = 6  # how deep a Compose / nn.Module / Sequential is looked into
PIXELS_ADVICE = ("pass output=iofeed.Output(pixels='0-1') (floats as ToTensor gives them, for your own Normalize) "
                 "or remove your normalisation")


def check_model_input(loader: Any) -> None:
    """Warn once per loader when the Keras model calling for its batches (found up the call
    stack: `fit`, `evaluate` and `predict` run as the model's methods) starts with a Rescaling or
    Normalization layer while the loader hands out normalised images rather than 0-255 pixels."""
    keras = sys.modules.get("keras")
    affine = options_affine(loader.options)
    if keras is None or loader in _warned or affine is None or affine == PIXELS_AFFINE:
        return
    model = _calling(lambda owner: owner if isinstance(owner, keras.Model) else None)
    if model is None:
        return
    _warned.add(loader)
    layer = _first_layer(keras, model)
    if isinstance(layer, (keras.layers.Rescaling, keras.layers.Normalization)):
        warnings.warn(f"model {model.name!r} starts with {type(layer).__name__} ({layer.name!r}), which expects "
                      "0-255 pixels, but iofeed hands it images already scaled by the loader: pass "
                      "output=iofeed.Output(pixels='0-255') (what framework='keras' gives by default, as "
                      "image_dataset_from_directory does) and drop mean=/std= from the Recipe, or remove the layer",
                      UserWarning, stacklevel=2)


def check_batch_transform(loader: Any) -> None:
    """Warn once when the loader normalises with a mean/std and its `batch_transform=` holds a
    `Normalize` (torchvision's, kornia's, Keras' `Normalization`...): found by looking into
    Compose lists, `nn.Module` children and Keras `Sequential` layers."""
    transform = loader.options.batch_transform
    if transform is None or loader in _warned or not normalises(options_affine(loader.options)):
        return
    found = next(_normalizers(transform), None)
    if found is not None:
        _warn(loader, f"batch_transform= holds {type(found).__name__} ({_short(found)}), which normalises images "
                      "iofeed has already normalised with the recipe's mean/std (else ImageNet's)")


def check_torch_model(loader: Any) -> None:
    """Warn once when a torch model found up the call stack — an `nn.Module` whose method builds or
    iterates the loader, a LightningModule's `setup`/`*_dataloader`, or the one a Lightning
    Trainer's loop is training — holds a `Normalize` while the loader normalises already."""
    torch = sys.modules.get("torch")
    if torch is None or loader in _warned or not normalises(options_affine(loader.options)):
        return
    model = _calling(lambda owner: _torch_model(torch, owner))
    if model is None:
        return
    for name, module in model.named_modules():
        if type(module).__name__ in NORMALIZERS:
            _warn(loader, f"model {type(model).__name__} holds {type(module).__name__} ({name or 'itself'}: "
                          f"{_short(module)}), which normalises images iofeed has already normalised with the "
                          "recipe's mean/std (else ImageNet's)")
            return


def check_output_range(loader: Any, images: Any, affine: Affine | None) -> None:
    """Warn once when a batch transform's output spans well beyond what `affine` makes of 0-255
    pixels (by more than that range's own width: ImageNet's −2.1…2.6 normalised again is −11…10;
    RandomErasing's normal noise and MixUp stay inside): normalised twice, by code iofeed cannot
    name. `images`: a torch tensor."""
    if loader is None or loader in _warned or not normalises(affine) or not images.is_floating_point():
        return
    assert affine is not None, "normalises(None) is False"
    scale, shift = affine
    ends = [s * v + t for s, t in zip(scale, shift) for v in (0.0, 255.0)]
    low, high = min(ends), max(ends)
    width = high - low
    found_low, found_high = float(images.min()), float(images.max())
    if found_low < low - width or found_high > high + width:
        _warn(loader, f"the batch transform's images span {found_low:.1f}…{found_high:.1f}, far beyond "
                      f"{low:.1f}…{high:.1f} of iofeed's normalisation: normalised twice?")


def _warn(loader: Any, what: str) -> None:
    _warned.add(loader)
    warnings.warn(f"{what}: {PIXELS_ADVICE}", UserWarning, stacklevel=3)


def _short(obj: Any) -> str:
    text = repr(obj).replace("\n", " ")
    return text if len(text) <= 80 else text[:79] + "…"


def _normalizers(obj: Any, depth: int = 0) -> Iterator[Any]:
    """`obj` and what it holds (Compose's `transforms`, `nn.Module` children, Keras `layers`, a
    list, a `functools.partial`) whose class is a Normalize."""
    if type(obj).__name__ in NORMALIZERS:
        yield obj
    if depth >= MAX_NESTING:
        return
    children: list[Any] = []
    if isinstance(obj, (list, tuple)):
        children = list(obj)
    for name in ("transforms", "layers", "func"):
        held = getattr(obj, name, None) if not isinstance(obj, (list, tuple, str, bytes)) else None
        if held is not None:
            children.extend(held if isinstance(held, (list, tuple)) else [held])
    if hasattr(obj, "children") and callable(obj.children):
        try:
            children.extend(obj.children())
        except TypeError:
            pass
    for child in children:
        yield from _normalizers(child, depth + 1)


def _torch_model(torch: Any, owner: Any) -> Any:
    """The model `owner` is or trains: an `nn.Module` itself, a Lightning Trainer's (or one of its
    loops') LightningModule; else None."""
    if isinstance(owner, torch.nn.Module):
        return owner
    for holder in (owner, getattr(owner, "trainer", None)):
        model = getattr(type(holder), "lightning_module", None) and getattr(holder, "lightning_module", None)
        if isinstance(model, torch.nn.Module):
            return model
    return None


def _calling(pick: Callable[[Any], Any]) -> Any:
    """The first `pick(self)` that is not None over the `self` of the frames up the call stack."""
    frame: FrameType | None = sys._getframe(2)
    for _ in range(DEPTH):
        if frame is None:
            return None
        owner = frame.f_locals.get("self")
        if owner is not None:
            found = pick(owner)
            if found is not None:
                return found
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
