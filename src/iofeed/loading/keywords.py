"""What `iofeed.loader` hands out per framework, for type checkers and editors: the batch types
its `@overload`s name, and the keywords every overload shares (`LoaderKeywords`). The framework
types are imported for type checkers only: importing iofeed imports no framework."""
from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any, TypedDict

if TYPE_CHECKING:
    from typing import TypeAlias

    import jax
    import tensorflow as tf
    import torch
    from numpy.typing import NDArray

    from ..adapters.keras import KerasBatches
    from ..augment.recipe import Recipe
    from ..options.groups import Cache, Order, Resources, Skips

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
    """`iofeed.loader`'s keywords but `batch_size`, `framework` and `extras` (which choose the
    result's type), with the types of its signature, and the flat spellings of the grouped
    options with their fields' types (tests/test_types.py keeps both equal)."""

    split: str
    image_size: int | None
    augment: bool | str | Recipe | None
    pixels: str | None
    device: Any
    dtype: Any
    backend: str
    rank: int | None
    world_size: int | None
    gpu_augment: bool
    target: str
    transform: Any
    batch_transform: Any
    sharding: Any
    memory_format: str | None
    order: Order | None
    resources: Resources | None
    cache: Cache | None
    skips: Skips | None
    pin_memory: bool | None
    persistent_workers: bool | None
    prefetch_factor: Any
    collate_fn: Any
    generator: Any
    # the flat spellings (option_groups.FLAT), typed as their fields
    shuffle: str | bool | None
    seed: int
    drop_last: bool | None
    block_shards: int
    workers: int | None
    prefetch: int | None
    memory_budget: int | None
    cache_dir: str | os.PathLike[str] | None
    cache_limit: int | None
    on_error: str
    max_skipped: float | None
