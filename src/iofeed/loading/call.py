"""`iofeed.loader(...)`: the one call that checks the options, opens the source and builds the
engine and the adapter; its `@overload`s tell a type checker what each framework hands out."""
from __future__ import annotations

import inspect
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, overload

from ..adapters.normalised_twice import check_batch_transform, check_torch_model
from ..augment.recipe import Recipe
from ..engines.select import choice_notes, engine_name, make_engine
from ..engines.skips import check_scanned
from ..errors import OptionError
from ..options.adapter_choices import ADAPTERS
from ..options.groups import Cache, Order, Resources, Skips, checked_group, with_flat
from ..options.loader_options import LoaderOptions
from ..sources.box_targets import open_boxes
from ..sources.mix import Mix
from ..sources.sample_targets import open_targets
from ..sources.samples import open_source, read_from
from .dataloader_compat import check_dataloader_arguments
from .loader import Loader
from .mix_source import Mixture
from .stats import json_value

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
    pixels: str | None = None,
    framework: str = "numpy",
    device: Any = None,
    dtype: Any = None,
    backend: str = "auto",
    rank: int | None = None,
    world_size: int | None = None,
    gpu_augment: bool = False,
    target: str = "class",
    extras: bool = False,
    transform: Any = None,
    batch_transform: Any = None,
    sharding: Any = None,
    memory_format: str | None = None,
    order: Order | None = None,
    resources: Resources | None = None,
    cache: Cache | None = None,
    skips: Skips | None = None,
    pin_memory: bool | None = None,
    persistent_workers: bool | None = None,
    prefetch_factor: Any = None,
    collate_fn: Any = None,
    generator: Any = None,
    **flat: Any,
) -> Any:
    """A loader over an iofeed dataset or an image folder: a `Loader` (numpy, torch) or a
    `tf.data.Dataset` (tf). Every argument is checked before any work starts; a bad one raises a
    one-line `OptionError`.

    Args:
        source: an iofeed dataset (made by `iofeed preprocess`; a path, or a URL: see below) or a
            folder with one subfolder per class (Caltech-256 layout accepted), or an `iofeed.Mix` of
            them, weighted (docs/formats.md, "Mixtures"; `stats.sources` counts per source).
        split: the dataset's split to read ("train", "val"); an image folder has one split, read
            whatever the name. `"train"` is shuffled each epoch (see `Order.shuffle`); others are read in order.
        batch_size: samples per batch (an int >= 1). With `Order.drop_last`, it may not exceed the
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
        pixels: the scale your script expects its images on: "uint8" (as decoded), "0-1" (floats,
            pixel / 255, as torchvision's `ToTensor` gives: for a script that keeps its own
            `Normalize`), "0-255" (floats, as Keras' `image_dataset_from_directory` gives) or
            "normalized" (`(pixel / 255 - mean) / std`, the recipe's mean/std else ImageNet's).
            Default: what the recipe says (`normalize=False`: uint8; `mean=`/`std=`: normalized),
            else the framework's convention (below). A recipe that contradicts it is refused.
        framework: "numpy" yields (uint8 NHWC arrays, int64 labels) — views of shared memory that
            stay as delivered while you hold them (kept past the pool: copies, counted in
            `stats.copied_batches`); "torch" yields normalised (the recipe's mean/std, else
            ImageNet's) NCHW tensors (see `memory_format`) and int64 labels on `device`; "tf"
            returns a `tf.data.Dataset` (`dataset.iofeed_loader` is the Loader) of float32 NHWC
            images, 0-255 as Keras' `image_dataset_from_directory` gives them unless the recipe
            has mean/std; "jax" yields `jax.Array`s, NHWC images (normalised float32 by default)
            and int32 labels, sharded over the batch axis (see `sharding`); "keras" what
            `model.fit` takes on Keras' backend (float32 0-255 NHWC like "tf"; iterable, with
            tf.data's `take`/`skip`/`repeat`/`map`/`prefetch` on every backend). `pixels=` sets
            the scale; with `normalize=False` in the recipe, torch and tf hand out uint8 images;
            keras still float32 0-255 on every backend.
        device: where batches end up: None or "cpu" (or "cpu:N"), "cuda", "cuda:N", an ordinal or a
            `torch.device`. The DALI engine decodes there; the torch adapter copies there. A CUDA
            device this process cannot see (no GPU) is refused at once: pass "cpu".
        dtype: floating-point torch dtype of the images (default float32; float16/bfloat16 are computed in
            float32 and rounded once). For `framework="jax"`: "float32" (default), "bfloat16"
            (normalised) or "uint8" (as decoded), as a name or a numpy/JAX dtype.
        backend: "workers" (CPU processes), "dali" (NVIDIA DALI; JPEG datasets and folders only)
            or "auto": DALI when `device` is a CUDA device, a GPU is present and DALI is
            installed and can read the source, else workers.
        rank, world_size: this process's share of each epoch (pass both, or neither): every
            rank gets the same number of batches, disjoint but for padding. Default: from an
            initialised torch.distributed group, else an initialised jax.distributed (process index
            and count), else RANK/WORLD_SIZE, else (0, 1).
        gpu_augment: with `framework="torch"`, the workers engine and an iofeed dataset (best
            made with `--format raw`): workers only gather each sample's stored pixels; the crop,
            resize and flip run on `device`.

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
            and exact resume. A transform that raises follows `Skips.on_error` (skipped and counted
            under "transform NAME raised ...", or a `SampleError` naming the file). uint8
            output is normalised by the adapter; float32 output is handed over as it is. Its
            wall time per image is `stats.transform_ms_per_image` (CPU time:
            `stats.transform_cpu_ms_per_image`). Workers engine only (`backend="auto"`
            picks it; "dali" and `gpu_augment` refuse it). The workers engine probes it when the
            loader is made: a wrong shape or dtype is refused then, naming the transform.
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
        order: the epoch order, an `iofeed.Order` (see it for its fields).
        resources: what the engine may use on this machine, an `iofeed.Resources`.
        cache: the node cache of a streamed dataset, an `iofeed.Cache`.
        skips: what happens to samples that cannot be read, an `iofeed.Skips`.
        **flat: the grouped fields by their flat names, as earlier versions took them: `shuffle`,
            `seed`, `drop_last`, `block_shards` (Order), `workers`, `prefetch`, `memory_budget`
            (Resources), `cache_dir`, `cache_limit` (Cache), `on_error`, `max_skipped` (Skips):
            `seed=3` is `order=iofeed.Order(seed=3)`, and one fills a field its object was not
            given. One given with its object's field passed as another value, even the default
            (`order=Order(seed=0), seed=5`), is refused naming both; a keyword that is no option
            is refused naming the close matches.

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
    check_dataloader_arguments(pin_memory, persistent_workers, prefetch_factor, collate_fn, generator)
    given = {"order": order, "resources": resources, "cache": cache, "skips": skips}
    groups = with_flat({name: checked_group(name, value) for name, value in given.items()}, flat,
                       [n for n in inspect.signature(loader).parameters if n != "flat"])
    options = LoaderOptions(
        batch_size=batch_size, split=split, image_size=image_size, augment=augment, pixels=pixels,
        framework=framework,
        device=device, dtype=dtype, backend=backend, rank=rank, world_size=world_size, gpu_augment=gpu_augment,
        target=target, extras=extras, transform=transform, batch_transform=batch_transform, sharding=sharding,
        memory_format=memory_format, **groups,
    )
    adapter = ADAPTERS[options.framework].load().from_options(options)  # imports the framework now, not before
    mixture = Mixture(source, options.split, options) if isinstance(source, Mix) else None
    path = "" if isinstance(source, Mix) else source  # a dataset or folder: what the rest opens
    data = mixture.data if mixture else open_source(path, options.split, cache_dir=options.cache.dir,
                                                            cache_limit=options.cache.limit)
    check_scanned(data.rejected, len(data), options.skips.max_skipped, str(source))
    spec = mixture.order(options) if mixture else options.order_spec(len(data), shard_of=data.file_id,
                                                                     streamed=data.remote is not None)
    if data.remote is not None:
        data.remote.fit_order(spec, readers=options.resources.workers or 1)
    targets, boxes = None, None
    if options.moves_targets:
        if mixture is not None or data.kind != "dataset" or data.remote is not None:
            raise OptionError(f"target={options.target!r} reads a local iofeed dataset made from a COCO folder, "
                              f"not {'a Mix' if mixture else 'streamed shards' if data.remote else 'a folder'}")
        boxes = open_boxes(path, options.split, data, masks=options.target == "masks")
    elif options.target != "class" or options.extras:
        targets = mixture.targets() if mixture else open_targets(path, options.split, data)
    loaded: Loader[Any] = Loader(data, spec, make_engine(options, data), adapter, options, targets, mixture, boxes)
    # what "auto" decided, and what the engine chose (the workers': which JPEG decode)
    loaded.stats.fixed["decisions"] = [*choice_notes(options, engine_name(options, data), data),
                                       *getattr(loaded.backend, "notes", [])]
    read = read_from(path) if mixture is None else [read_from(name) for name in mixture.names]
    loaded.stats.fixed["source"] = read  # what `iofeed doctor` checks: the data really read
    asked = {name: json_value(value) for name, value in options.keywords().items()}  # by loader() keyword
    loaded.stats.fixed["options"] = asked  # what it was asked for, beside what the engine made of it
    wrapped = adapter.wrap(loaded)
    check_batch_transform(loaded)  # a Normalize on top of the loader's own, where iofeed can see one
    if options.framework == "torch":
        check_torch_model(loaded)  # a LightningModule building its loaders in setup() / *_dataloader()
    return wrapped
