"""`iofeed.loader(...)`: the one call that checks the options, opens the source and builds the
engine and the adapter; its `@overload`s tell a type checker what each framework hands out."""
from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, overload

from .adapters.registry import ADAPTERS
from .backends.select import choice_notes, engine_name, make_engine
from .backends.skips import DEFAULT_MAX_SKIPPED, check_scanned
from .gpu.device import usable_device
from .loader import Loader
from .loader_stats import described
from .manners import check_dataloader_arguments
from .mix import Mix
from .mixsource import Mixture
from .options import LoaderOptions
from .recipe import Recipe
from .samples import open_source, read_from
from .targets import open_targets

if TYPE_CHECKING:
    from typing_extensions import Unpack

    from .loader_types import (
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


# The overloads tell a type checker what `framework=` (and `extras=`) give; the keywords they share are
# `LoaderKeywords`. A framework named by a plain `str` falls through to the last one: Any.
@overload
def loader(source: str | Path | Mix, *, batch_size: int, framework: Literal["numpy"] = ...,
           extras: Literal[False] = ..., **options: Unpack[LoaderKeywords]) -> Loader[NumpyBatch]: ...
@overload
def loader(source: str | Path | Mix, *, batch_size: int, framework: Literal["numpy"] = ...,
           extras: Literal[True], **options: Unpack[LoaderKeywords]) -> Loader[NumpyExtrasBatch]: ...
@overload
def loader(source: str | Path | Mix, *, batch_size: int, framework: Literal["torch"],
           extras: Literal[False] = ..., **options: Unpack[LoaderKeywords]) -> Loader[TorchBatch]: ...
@overload
def loader(source: str | Path | Mix, *, batch_size: int, framework: Literal["torch"],
           extras: Literal[True], **options: Unpack[LoaderKeywords]) -> Loader[TorchExtrasBatch]: ...
@overload
def loader(source: str | Path | Mix, *, batch_size: int, framework: Literal["jax"],
           extras: Literal[False] = ..., **options: Unpack[LoaderKeywords]) -> Loader[JaxBatch]: ...
@overload
def loader(source: str | Path | Mix, *, batch_size: int, framework: Literal["jax"],
           extras: Literal[True], **options: Unpack[LoaderKeywords]) -> Loader[JaxExtrasBatch]: ...
@overload
def loader(source: str | Path | Mix, *, batch_size: int, framework: Literal["tf"],
           extras: Literal[False] = ..., **options: Unpack[LoaderKeywords]) -> TfDataset: ...
@overload
def loader(source: str | Path | Mix, *, batch_size: int, framework: Literal["keras"],
           extras: Literal[False] = ..., **options: Unpack[LoaderKeywords]) -> KerasData: ...
@overload
def loader(source: str | Path | Mix, *, batch_size: int, framework: str = ..., extras: bool = ...,
           **options: Unpack[LoaderKeywords]) -> Any: ...
def loader(
    source: str | Path | Mix,
    *,
    split: str = "train",
    batch_size: int,
    image_size: int | None = None,
    augment: bool | str | Recipe | None = None,
    framework: str = "numpy",
    device: Any = None,
    dtype: Any = None,
    backend: str = "auto",
    workers: int | None = None,
    prefetch: int | None = None,
    seed: int = 0,
    rank: int | None = None,
    world_size: int | None = None,
    drop_last: bool | None = None,
    on_error: str = "skip",
    memory_budget: int | None = None,
    gpu_augment: bool = False,
    shuffle: str | bool | None = None,
    block_shards: int = 8,
    cache_dir: str | Path | None = None,
    cache_limit: int | None = None,
    target: str = "class",
    extras: bool = False,
    max_skipped: float | None = DEFAULT_MAX_SKIPPED,
    transform: Any = None,
    batch_transform: Any = None,
    sharding: Any = None,
    memory_format: str | None = None,
    pin_memory: bool | None = None,
    persistent_workers: bool | None = None,
    prefetch_factor: Any = None,
    collate_fn: Any = None,
    generator: Any = None,
) -> Any:
    """A loader over an iofeed dataset or an image folder: a `Loader` (numpy, torch) or a
    `tf.data.Dataset` (tf). Every argument is checked before any work starts; a bad one raises a
    one-line `OptionError`.

    Args:
        source: an iofeed dataset (made by `iofeed preprocess`; a path, or a URL: see below) or a
            folder with one subfolder per class (Caltech-256 layout accepted), or an `iofeed.Mix` of
            them, weighted (docs/formats.md, "Mixtures"; `stats.sources` counts per source).
        split: the dataset's split to read ("train", "val"); an image folder has one split, read
            whatever the name. `"train"` is shuffled each epoch (see `shuffle`); others are read in order.
        batch_size: samples per batch (an int >= 1). With `drop_last`, it may not exceed the
            samples of the split on this rank (that would be no batch at all).
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
        framework: "numpy" yields (uint8 NHWC arrays, int64 labels) — views of shared memory that
            stay as delivered while you hold them (kept past the pool: copies, counted in
            `stats.copied_batches`); "torch" yields normalised (the recipe's mean/std, else
            ImageNet's) NCHW tensors (see `memory_format`) and int64 labels on `device`; "tf"
            returns a `tf.data.Dataset` (`dataset.iofeed_loader` is the Loader) of float32 NHWC
            images, 0-255 as Keras' `image_dataset_from_directory` gives them unless the recipe
            has mean/std; "jax" yields `jax.Array`s, NHWC images (normalised float32 by default)
            and int32 labels, sharded over the batch axis (see `sharding`); "keras" what
            `model.fit` takes on Keras' backend (float32 0-255 NHWC like "tf"; `take`/`repeat`
            on every backend). With
            `normalize=False` in the recipe, torch and tf hand out uint8 images.
        device: where batches end up: None or "cpu", "cuda", "cuda:N", an ordinal or a
            `torch.device`. The DALI engine decodes there; the torch adapter copies there. A CUDA
            device this process cannot see (no GPU) is refused at once: pass "cpu".
        dtype: floating-point torch dtype of the images (default float32; float16/bfloat16 are computed in
            float32 and rounded once). For `framework="jax"`: "float32" (default), "bfloat16"
            (normalised) or "uint8" (as decoded), as a name or a numpy/JAX dtype.
        backend: "workers" (CPU processes), "dali" (NVIDIA DALI; JPEG datasets and folders only)
            or "auto": DALI when `device` is a CUDA device, a GPU is present and DALI is
            installed and can read the source, else workers.
        workers: worker processes (workers engine) or threads (DALI). None autotunes the workers
            engine: one worker at first, then the count that keeps the consumer from waiting, up
            to the usable cores — CPU affinity and cgroup quota, shared among the node's local ranks
            (`LOCAL_WORLD_SIZE`); see `stats.settings["decisions"]` and `["cores_because"]`; for
            DALI, the usable cores.
        prefetch: batches made ahead (an int >= 1). Default: two per worker, at least 8 (workers
            engine, within `memory_budget`); 2 for DALI.
        seed: seed of the shuffle and of the augmentation (an int >= 0): the order and the
            crops are a function of (seed, epoch, rank, batch), whatever the engine or workers.
        rank, world_size: this process's share of each epoch (pass both, or neither): every
            rank gets the same number of batches, disjoint but for padding. Default: from an
            initialised torch.distributed group, else an initialised jax.distributed (process index
            and count), else RANK/WORLD_SIZE, else (0, 1).
        drop_last: drop each rank's last incomplete batch. Default: True for `split="train"`.
        on_error: "skip" a sample that cannot be read (counted in `stats.skipped`, with the
            first few paths in `stats.skipped_examples`), or "raise" a `SampleError` naming it.
            A skipped sample's place goes to a spare sample (the rank's later ones, counted in
            `stats.refilled`), so every rank delivers `len(loader)` full batches (a batch that
            runs out of spares stays short, or is not delivered: `stats.skipped_batches`). An
            evaluation split that deals each sample once takes no spares: the batch stays short.
        max_skipped: the share of an epoch's samples (on this rank) that may be skipped, a fraction
            in 0..1 (default 0.05; 0: any skip raises). Past it, or when an epoch delivers no batch,
            a `SampleError` gives the counts by reason and the first files; for a folder, files
            its scan rejected inside class folders are held to it when the loader is made. None:
            skips are counted, never raised.
        memory_budget: bytes of memory for the workers engine's batch slots (an int >= 1;
            anonymous shared memory, not limited by /dev/shm). Default: a quarter of the memory
            this process may use (available RAM, capped by the cgroup limit), shared among local
            ranks; see `stats.settings["memory_because"]`.
        gpu_augment: with `framework="torch"`, the workers engine and an iofeed dataset (best
            made with `--format raw`): workers only gather each sample's stored pixels; the crop,
            resize and flip run on `device`.

        shuffle: the epoch order: "global" (a permutation of all samples; the default for the
            train split of a local dataset or folder), "block" (the default for a streamed train
            split: shards in a shuffled order, samples shuffled within blocks of `block_shards`
            shards, so that only two blocks are live at a time) or "none" (the default for
            other splits); True and False (as torch's DataLoader takes them) mean that default
            of the train split, and "none". Every order is a function of (seed, epoch, rank, world_size).
        block_shards: shards per block of `shuffle="block"` (an int >= 1).
        cache_dir: the node-local cache of a streamed dataset, shared by every rank of the node
            (default `IOFEED_CACHE`, else ~/.cache/iofeed): a new or empty folder, or one iofeed
            marked as its cache (a non-empty folder without the mark is refused); ignored for local paths.
        cache_limit: bytes the cache may hold (an int >= 1; default: what it holds plus the free
            disk less max(2 GiB, 5% of the free disk)); it must hold the shards the order keeps live.
        target: "class" (int64 class indices) or "multi_hot" (float32 (batch, classes) vectors, 1
            for each class of a multi-label sample; a single-label dataset gives one-hot rows).
        extras: with True each batch is (images, labels, extras), `extras` the list of the
            samples' extra JSON values (None where a sample has none), as the dataset stores them
            (`json` members: WebDataset json, labels-file columns). Not with framework="tf".
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
            and exact resume. A transform that raises follows `on_error` (skipped and counted
            under "transform NAME raised ...", or a `SampleError` naming the file). uint8
            output is normalised by the adapter; float32 output is handed over as it is. Its
            wall time per image is `stats.transform_ms_per_image` (CPU time:
            `stats.transform_cpu_ms_per_image`). Workers engine only (`backend="auto"`
            picks it; "dali" and `gpu_augment` refuse it).
        batch_transform: your own per-batch step `(images, labels) -> (images, labels)`, run in
            this process on each batch where it ends up (on `device`, after normalisation):
            torchvision v2 `MixUp`/`CutMix` (labels become soft), kornia on GPU tensors, or for
            `framework="tf"` a function of tf tensors, run inside the dataset's `.map` (it may
            take `seed=`, a stateless-RNG seed tensor). Seeded per batch from (seed, epoch, rank,
            batch) — torch's, numpy's and Python's RNGs, restored after the call — and given
            `rng=` when it takes one. It returns `(images, labels)` of the batch's length (else
            an OptionError naming it). Any engine.
        sharding: with `framework="jax"`, the `jax.sharding.Sharding` of each batch (default: a
            `NamedSharding` splitting the batch axis over every device, `PartitionSpec("batch")`).
            Under `jax.distributed` each process loads `batch_size` samples of its own share and
            the arrays are the global batch of `batch_size * jax.process_count()` rows.
        memory_format: with `framework="torch"`, "contiguous" (the default: plain NCHW, what a
            model in PyTorch's default format expects; DDP warns "Grad strides do not match
            bucket view strides" otherwise) or "channels_last" (NHWC memory: pays with the model
            converted too, `model.to(memory_format=torch.channels_last)`, under AMP on a GPU).
        pin_memory, persistent_workers: torch DataLoader's, accepted and ignored: copies to CUDA
            already go through pinned buffers, and the workers live as long as the loader.
        prefetch_factor, collate_fn, generator: torch DataLoader's; anything but None is refused
            naming iofeed's own option (`prefetch=`, `batch_transform=`, `seed=`).

    `source` may also be the s3://, gs:// or http(s):// URL of an iofeed dataset (`pip install
    'iofeed[s3]'`, `[gcs]`, `[http]`; credentials and endpoint the standard way): its shards are
    fetched whole, ahead of decoding, into `cache_dir`, and each is checked against the size and
    sha256 its manifest records. A shard that cannot be fetched after retries raises, or with
    `on_error="skip"` its samples are skipped and counted; `stats.fetched` sums the node's
    downloads since the dataset was opened.

    Each `iter()` is a new pass, as with torch's DataLoader: breaking out of an epoch and
    iterating again starts that epoch again from its first batch (an evaluation split is always
    read whole); `state_dict()` and `load_state_dict()` resume exactly, also on another world size, batch size or engine
    (docs/distributed.md); `close()` (or `with`) frees processes and memory.
    """
    check_dataloader_arguments(pin_memory, persistent_workers, prefetch_factor, collate_fn, generator)
    options = LoaderOptions(
        batch_size=batch_size, split=split, image_size=image_size, augment=augment, framework=framework,
        device=usable_device(device), dtype=dtype, backend=backend, workers=workers, prefetch=prefetch, seed=seed,
        rank=rank, world_size=world_size, drop_last=drop_last, on_error=on_error, memory_budget=memory_budget,
        gpu_augment=gpu_augment, shuffle=shuffle, block_shards=block_shards, cache_dir=cache_dir,
        cache_limit=cache_limit, target=target, extras=extras, max_skipped=max_skipped, transform=transform,
        batch_transform=batch_transform, sharding=sharding, memory_format=memory_format,
    )
    adapter = ADAPTERS[framework].load().from_options(options)  # imports the framework now, not before
    mixture = Mixture(source, split, options) if isinstance(source, Mix) else None
    path = "" if isinstance(source, Mix) else source  # a dataset or folder: what the rest opens
    data = mixture.data if mixture else open_source(path, split, cache_dir=options.cache_dir,
                                                    cache_limit=options.cache_limit)
    check_scanned(data.rejected, len(data), options.max_skipped, str(source))
    order = mixture.order(options) if mixture else options.order(len(data), shard_of=data.file_id,
                                                                 streamed=data.remote is not None)
    if data.remote is not None:
        data.remote.fit_order(order, readers=options.workers or 1)
    targets = None
    if target != "class" or extras:
        targets = mixture.targets() if mixture else open_targets(path, split, data)
    loaded: Loader[Any] = Loader(data, order, make_engine(options, data), adapter, options, targets, mixture)
    loaded.stats.fixed["decisions"] = choice_notes(options, engine_name(options, data), data)  # what "auto" decided
    read = read_from(path) if mixture is None else [read_from(name) for name in mixture.names]
    loaded.stats.fixed["source"] = read  # what `iofeed doctor` checks: the data really read
    loaded.stats.fixed["options"] = described(options)  # what it was asked for, beside what the engine made of it
    return adapter.wrap(loaded)
