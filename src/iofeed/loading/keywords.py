"""What `iofeed.loader` hands out per framework, for type checkers and editors: the batch types
its `@overload`s name, and the keywords every overload shares (`LoaderKeywords`). The framework
types are imported for type checkers only: importing iofeed imports no framework."""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, TypedDict

if TYPE_CHECKING:
    from typing import TypeAlias

    import jax
    import tensorflow as tf
    import torch
    from numpy.typing import NDArray

    from ..adapters.keras import KerasBatches
    from ..augment.recipe import Recipe
    from ..options.groups import Cache, Order, Placement, Resources, Skips

    # Labels are int64 class indices, or float32 rows with target="multi_hot"; a `batch_transform`
    # may change either (MixUp's soft labels): the arrays' dtypes are left open.
    NumpyBatch: TypeAlias = tuple[NDArray[Any], NDArray[Any]]
    NumpyExtrasBatch: TypeAlias = tuple[NDArray[Any], NDArray[Any], list[Any]]
    TorchBatch: TypeAlias = tuple[torch.Tensor, torch.Tensor]
    TorchExtrasBatch: TypeAlias = tuple[torch.Tensor, torch.Tensor, list[Any]]
    JaxBatch: TypeAlias = tuple[jax.Array, jax.Array]
    JaxExtrasBatch: TypeAlias = tuple[jax.Array, jax.Array, list[Any]]
    TfDataset: TypeAlias = tf.data.Dataset[tuple[tf.Tensor, tf.Tensor]]
    # framework="keras": a tf.data.Dataset on Keras' TensorFlow backend, else a Keras data adapter.
    KerasData: TypeAlias = TfDataset | KerasBatches


class LoaderKeywords(TypedDict, total=False):
    """`iofeed.loader`'s keywords but `batch_size`, `framework` and `output` (which choose the
    result's type), with the types of its signature, and torch DataLoader's keywords it accepts:
    `pin_memory`/`persistent_workers` as flags, the others only as None, as at run time
    (tests/test_types.py keeps these equal to the signature and `dataloader_compat`)."""

    split: str
    shuffle: str | bool | None
    drop_last: bool | None
    workers: int | None
    seed: int
    image_size: int | None
    augment: bool | str | Recipe | None
    transform: Any
    batch_transform: Any
    gpu_augment: bool
    engine: str
    placement: Placement | None
    order: Order | None
    resources: Resources | None
    cache: Cache | None
    skips: Skips | None
    # torch DataLoader's (loading/dataloader_compat.py)
    pin_memory: bool | None
    persistent_workers: bool | None
    prefetch_factor: None
    collate_fn: None
    generator: None
