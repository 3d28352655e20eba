"""`iofeed.loader(...)`: the one call that builds a loader. Its `@overload`s tell a type checker
what each framework hands out; at run time it turns torch DataLoader's keywords and the spellings
of earlier versions into one-line errors (or accepts them where that is right) and calls
`build.loader`, whose signature it shows (`inspect.signature`, `help()`)."""
from __future__ import annotations

import inspect
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, overload

from ..options.groups import Output
from ..options.spellings import check_spellings
from ..sources.mix import Mix
from . import build
from .dataloader_compat import take_dataloader_keywords
from .loader import Loader

if TYPE_CHECKING:
    from typing_extensions import Unpack

    from .keywords import (
        JaxBatch,
        JaxExtrasBatch,
        KerasData,
        LoaderKeywords,
        NumpyBatch,
        NumpyExtrasBatch,
        TfDataset,
        TorchBatch,
        TorchExtrasBatch,
    )

Source = str | Path | Mix
NoExtras = Output[Literal[False]] | None
# The overloads tell a type checker what `framework=` (and `Output(extras=...)`) give; the keywords
# they share are `LoaderKeywords`. A framework named by a plain `str` falls through to the last one: Any.
@overload
def loader(source: Source, *, batch_size: int, framework: Literal["numpy"] = ..., output: NoExtras = ...,
           **options: Unpack[LoaderKeywords]) -> Loader[NumpyBatch]: ...
@overload
def loader(source: Source, *, batch_size: int, framework: Literal["numpy"] = ..., output: Output[Literal[True]],
           **options: Unpack[LoaderKeywords]) -> Loader[NumpyExtrasBatch]: ...
@overload
def loader(source: Source, *, batch_size: int, framework: Literal["torch"], output: NoExtras = ...,
           **options: Unpack[LoaderKeywords]) -> Loader[TorchBatch]: ...
@overload
def loader(source: Source, *, batch_size: int, framework: Literal["torch"], output: Output[Literal[True]],
           **options: Unpack[LoaderKeywords]) -> Loader[TorchExtrasBatch]: ...
@overload
def loader(source: Source, *, batch_size: int, framework: Literal["jax"], output: NoExtras = ...,
           **options: Unpack[LoaderKeywords]) -> Loader[JaxBatch]: ...
@overload
def loader(source: Source, *, batch_size: int, framework: Literal["jax"], output: Output[Literal[True]],
           **options: Unpack[LoaderKeywords]) -> Loader[JaxExtrasBatch]: ...
@overload
def loader(source: Source, *, batch_size: int, framework: Literal["tf"], output: NoExtras = ...,
           **options: Unpack[LoaderKeywords]) -> TfDataset: ...
@overload
def loader(source: Source, *, batch_size: int, framework: Literal["keras"], output: NoExtras = ...,
           **options: Unpack[LoaderKeywords]) -> KerasData: ...
@overload
def loader(source: Source, *, batch_size: int, framework: str = ..., output: Output[bool] | None = ...,
           **options: Unpack[LoaderKeywords]) -> Any: ...
def loader(*args: Any, **keywords: Any) -> Any:
    """A loader over an iofeed dataset or an image folder: a `Loader` (numpy, torch, jax) or a
    `tf.data.Dataset` (tf). Every argument is checked before any work starts; a bad one raises a
    one-line `OptionError`, and so does a keyword spelled as earlier versions took it (`prefetch=2`
    names `resources=iofeed.Resources(prefetch=2)`).

    Args:
        source: an iofeed dataset (made by `iofeed preprocess`; a path, or a URL: see below) or a
            folder with one subfolder per class (Caltech-256 layout accepted), or an `iofeed.Mix` of
            them, weighted (docs/formats.md, "Mixtures"; `stats.sources` counts per source).
        split: the dataset's split to read ("train", "val"); an image folder has one split, read
            whatever the name. `"train"` is shuffled each epoch (see `shuffle`); others are read in order.
        batch_size, shuffle, drop_last, workers, seed: as torch's DataLoader takes them.
            batch_size: samples per batch (an int >= 1); with `drop_last` it may not exceed the
            samples of the split on this rank (that would be no batch at all).
            shuffle: "global" (a permutation of all samples; the default for the train split of
            a local dataset or folder), "block" (the default for a streamed train split: see
            `Order.block_shards`) or "none" (the default for other splits); True and False mean
            that default of the train split, and "none".
            drop_last: drop each rank's last incomplete batch. Default (None): True for
            `split="train"`.
            workers: worker processes (workers engine) or threads (DALI), an int >= 1. None
            autotunes the workers engine: one worker at first, then the count that keeps the
            consumer from waiting, up to the usable cores — CPU affinity and cgroup quota, shared
            among the node's local ranks (`LOCAL_WORLD_SIZE`); see `stats.settings["decisions"]`
            and `["cores_because"]`; for DALI, the usable cores.
            seed: seed of the shuffle and of the augmentation (an int >= 0): the order and the
            crops are a function of (seed, epoch, rank, batch), whatever the engine or workers.
        image_size: side of the square output images in pixels (an int >= 8). Default: the
            recipe's (`Recipe.from_timm`), else 224.
        augment: the built-in steps, an `iofeed.Recipe` or a preset name: "imagenet" (the default:
            random-resized crop of area 0.08–1 and ratio 3/4–4/3, horizontal flip, bilinear,
            ImageNet mean/std; evaluation: centre crop of 0.875), "finetune" (area 0.35–1),
            "timm" (bicubic), "inception" (bicubic, mean = std = 0.5) or "uint8" (no
            normalisation). `Recipe(scale=, ratio=, flip=, crop_fraction=, interpolation=
            "bilinear"|"bicubic"|"area", mean=, std=, normalize=, train=)` sets each step; True
            and False force the random crop or the centre crop; None (default) augments the
            train split only. Every engine does every step or refuses it naming the one that
            can ("area": workers only; `gpu_augment`: bilinear only).
        transform: your own per-sample augmentation, run in the worker processes on each
            image after iofeed's crop and resize: `transform(image)` with `image` uint8 HWC
            (numpy), returning uint8 or float32 HWC with 3 channels (a torch tensor: CHW, as
            torchvision returns it) of one fixed shape, probed on a first image. A torchvision v2
            transform (start it with `v2.ToImage()`), an albumentations `Compose` (called as
            `t(image=...)`, seeded through `set_random_seed`) or a function. It must be
            picklable and importable: a lambda, or a function defined in `__main__`, is refused.
            Before each call Python's `random`, numpy's global RNG and torch's RNG are seeded
            from (seed, epoch, rank, batch, position), and a callable with an `rng` parameter
            gets a seeded `numpy.random.Generator`: the same pixels whatever the worker count,
            and exact resume. A transform that raises follows `Skips.on_error` (skipped and counted
            under "transform NAME raised ...", or a `SampleError` naming the file). uint8
            output is normalised by the adapter; float32 output is handed over as it is. Its
            wall time per image is `stats.transform_ms_per_image` (CPU time:
            `stats.transform_cpu_ms_per_image`). Workers engine only (`engine="auto"`
            picks it; "dali" and `gpu_augment` refuse it). The workers engine probes it when the
            loader is made: a wrong shape or dtype is refused then, naming the transform.
        batch_transform: your own per-batch step `(images, labels) -> (images, labels)`, run in
            this process on each batch where it ends up (on `Placement.device`, after normalisation):
            torchvision v2 `MixUp`/`CutMix` (labels become soft), kornia on GPU tensors, or for
            `framework="tf"` a function of tf tensors, run inside the dataset's `.map` (it may
            take `seed=`, a stateless-RNG seed tensor). Seeded per batch from (seed, epoch, rank,
            batch) — torch's, numpy's and Python's RNGs, restored after the call — and given
            `rng=` when it takes one. It returns `(images, labels)` of the batch's length (else
            an OptionError naming it). Any engine.
        gpu_augment: with `framework="torch"`, the workers engine and an iofeed dataset (best
            made with `--format raw`): workers only gather each sample's stored pixels; the crop,
            resize and flip run on `Placement.device`.
        framework: "numpy" yields (uint8 NHWC arrays, int64 labels) — views of shared memory that
            stay as delivered while you hold them (kept past the pool: copies, counted in
            `stats.copied_batches`); "torch" yields normalised (the recipe's mean/std, else
            ImageNet's) NCHW tensors (see `Output.memory_format`) and int64 labels on `Placement.device`; "tf"
            returns a `tf.data.Dataset` (`dataset.iofeed_loader` is the Loader) of float32 NHWC
            images, 0-255 as Keras' `image_dataset_from_directory` gives them unless the recipe
            has mean/std; "jax" yields `jax.Array`s, NHWC images (normalised float32 by default)
            and int32 labels, sharded over the batch axis (see `Placement.sharding`); "keras" what
            `model.fit` takes on Keras' backend (float32 0-255 NHWC like "tf"; iterable, with
            tf.data's `take`/`skip`/`repeat`/`map`/`prefetch` on every backend). `Output.pixels`
            sets the scale; with `normalize=False` in the recipe, torch and tf hand out uint8 images;
            keras still float32 0-255 on every backend.
        engine: what makes the batches: "workers" (CPU processes), "dali" (NVIDIA DALI; JPEG
            datasets and folders only) or "auto" (the default): the first engine that can do what
            is asked, in the registry's order; it never takes "dali" (why:
            `stats.settings["decisions"]`), so "auto" is "workers" today.
        placement: where batches go, an `iofeed.Placement(device, rank, world_size, sharding)`.
        output: what each batch looks like, an `iofeed.Output(dtype, memory_format, target,
            extras)`; `extras=True` makes each batch (images, labels, extras).
        order: the epoch order beyond shuffle/seed/drop_last, an `iofeed.Order(block_shards)`.
        resources: what the engine may use on this machine, an `iofeed.Resources(prefetch,
            memory_budget)`.
        cache: the node cache of a streamed dataset, an `iofeed.Cache(dir, limit)`.
        skips: what happens to samples that cannot be read, an `iofeed.Skips(on_error,
            max_skipped)`.

    torch DataLoader's `pin_memory` and `persistent_workers` are accepted and ignored (copies to
    CUDA already go through pinned buffers; the workers live as long as the loader);
    `prefetch_factor`, `collate_fn` and `generator` are refused unless None, naming iofeed's own
    option (`Resources.prefetch`, `batch_transform=`, `seed=`).

    `source` may also be the s3://, gs:// or http(s):// URL of an iofeed dataset (`pip install
    'iofeed[s3]'`, `[gcs]`, `[http]`; credentials and endpoint the standard way): its shards are
    fetched whole, ahead of decoding, into the node cache (`iofeed.Cache`), and each is checked against the size and
    sha256 its manifest records. A shard that cannot be fetched after retries raises, or with
    `Skips(on_error="skip")` its samples are skipped and counted; `stats.fetched` sums the node's
    downloads since the dataset was opened.

    Each `iter()` is a new pass, as with torch's DataLoader: breaking out of an epoch and
    iterating again starts that epoch again from its first batch (an evaluation split is always
    read whole); `state_dict()` and `load_state_dict()` resume exactly, also on another world size, batch size or engine
    (docs/distributed.md); `close()` (or `with`) frees processes and memory.
    """
    take_dataloader_keywords(keywords)
    check_spellings(keywords, CANONICAL)
    return build.loader(*args, **keywords)


CANONICAL = tuple(inspect.signature(build.loader).parameters)  # every keyword as it is spelled now
# What `inspect.signature(iofeed.loader)` and `help()` show: the keywords as they are spelled now,
# not the `**keywords` this wrapper takes to answer the earlier spellings in one line.
setattr(loader, "__signature__", inspect.signature(build.loader))  # noqa: B010 - no attribute on a function's type
