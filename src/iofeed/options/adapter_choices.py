"""The adapters `iofeed.loader(framework=...)` can choose, with what each takes."""
from __future__ import annotations

from dataclasses import dataclass

from ..runtime.registry import Entry, Registry


@dataclass(frozen=True)
class AdapterCaps:
    """What an adapter takes from the engine and from the caller."""

    host: bool  # wants host arrays: an engine decoding on a GPU copies its batches to the host
    packs: bool  # takes packed batches (`gpu_augment`) and augments them on the device
    dtype: bool  # honours `Output.dtype`
    sharding: bool = False  # honours `Placement.sharding` (a framework sharding of the batch over devices)
    dlpack: bool = False  # takes a GPU engine's batches by DLPack all the same when the loader's device is a GPU


# An entry's target is an adapter class, built as `target.from_options(options)` (see adapters/base.py).
ADAPTERS: Registry[AdapterCaps] = Registry("framework", {
    "numpy": Entry("iofeed.adapters.numpy:NumpyAdapter", AdapterCaps(host=True, packs=False, dtype=False)),
    "torch": Entry("iofeed.adapters.torch.adapter:TorchAdapter", AdapterCaps(host=False, packs=True, dtype=True),
                   extra="torch"),
    "tf": Entry("iofeed.adapters.tf:TfAdapter", AdapterCaps(host=True, packs=False, dtype=False), extra="tf"),
    "jax": Entry("iofeed.adapters.jax:JaxAdapter", AdapterCaps(host=True, packs=False, dtype=True, sharding=True,
                                                               dlpack=True), extra="jax"),
    "keras": Entry("iofeed.adapters.keras:KerasAdapter", AdapterCaps(host=True, packs=False, dtype=False),
                   extra="keras"),
})


def wants_host_arrays(framework: str, cuda: bool) -> bool:
    """Whether `framework`'s adapter wants host arrays from an engine decoding on a GPU (which then
    copies each batch to the host): not when it takes device batches by DLPack and the loader's
    device is a GPU (JAX: a round trip device → host → device otherwise)."""
    caps = ADAPTERS.caps(framework)
    return caps.host and not (caps.dlpack and cuda)
