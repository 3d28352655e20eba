"""A loader built from `iofeed.loader`'s keywords as they are spelled now: the options checked, the
source opened, the engine and the adapter chosen. Its signature is the one `iofeed.loader` shows
(`loading/call.py` turns earlier spellings into one-line errors before calling it)."""
from __future__ import annotations

from pathlib import Path
from typing import Any

from ..adapters.normalised_twice import check_batch_transform, check_torch_model
from ..augment.recipe import Recipe
from ..engines.select import choice_notes, engine_name, make_engine
from ..engines.skips import check_scanned
from ..errors import OptionError
from ..options.adapter_choices import ADAPTERS
from ..options.groups import Cache, Order, Output, Placement, Resources, Skips, checked_group
from ..options.loader_options import LoaderOptions
from ..sources.box_targets import open_boxes
from ..sources.captions import open_captions
from ..sources.mix import Mix
from ..sources.sample_targets import open_targets
from ..sources.samples import open_source, read_from
from .loader import Loader
from .mix_source import Mixture
from .stats import json_value


def loader(
    source: str | Path | Mix,
    *,
    split: str = "train",
    batch_size: int,
    shuffle: str | bool | None = None,
    drop_last: bool | None = None,
    workers: int | None = None,
    seed: int = 0,
    image_size: int | None = None,
    augment: bool | str | Recipe | None = None,
    transform: Any = None,
    batch_transform: Any = None,
    gpu_augment: bool = False,
    framework: str = "numpy",
    engine: str = "auto",
    placement: Placement | None = None,
    output: Output[Any] | None = None,
    order: Order | None = None,
    resources: Resources | None = None,
    cache: Cache | None = None,
    skips: Skips | None = None,
) -> Any:
    """`iofeed.loader` (see its docstring) with every keyword spelled as it is now."""
    objects = {"placement": placement, "output": output, "order": order, "resources": resources, "cache": cache,
               "skips": skips}
    options = LoaderOptions(
        batch_size=batch_size, split=split, shuffle=shuffle, drop_last=drop_last, workers=workers, seed=seed,
        image_size=image_size, augment=augment, transform=transform, batch_transform=batch_transform,
        gpu_augment=gpu_augment, framework=framework, engine=engine,
        **{name: checked_group(name, value) for name, value in objects.items()},  # None: the default object
    )
    adapter = ADAPTERS[options.framework].load().from_options(options)  # imports the framework now, not before
    backend = getattr(adapter, "keras_backend", "tensorflow")  # Keras' own backend
    if options.moves_targets and backend != "tensorflow":
        raise OptionError(f"Output.target={options.output.target!r} with framework='keras' is built for Keras' "
                          f"tensorflow backend (ragged boxes), Keras uses {backend!r}: use framework='jax' or 'torch'")
    mixture = Mixture(source, options.split, options) if isinstance(source, Mix) else None
    path = "" if isinstance(source, Mix) else source  # a dataset or folder: what the rest opens
    data = mixture.data if mixture else open_source(path, options.split, cache_dir=options.cache.dir,
                                                            cache_limit=options.cache.limit)
    check_scanned(data.rejected, len(data), options.skips.max_skipped, str(source))
    spec = mixture.order(options) if mixture else options.order_spec(len(data), shard_of=data.file_id,
                                                                     streamed=data.remote is not None)
    if data.remote is not None:
        data.remote.fit_order(spec, readers=options.workers or 1)
    targets, boxes, captions = None, None, None
    if options.moves_targets:
        if mixture is not None or data.kind != "dataset" or data.remote is not None:
            raise OptionError(f"Output.target={options.output.target!r} reads a local iofeed dataset made from a COCO "
                              f"folder, not {'a Mix' if mixture else 'streamed shards' if data.remote else 'a folder'}")
        boxes = open_boxes(path, options.split, data, masks=options.output.target == "masks")
        if options.transform is not None:  # it takes and returns them in the workers
            if boxes.semantic:
                raise OptionError(f"transform= with {path}'s semantic masks is not supported (it takes boxes and "
                                  "instance masks): use the Recipe's geometry, or a batch_transform on the masks")
            data.boxes = boxes
    elif options.output.target == "text":
        if mixture is not None or data.kind != "dataset":
            raise OptionError("Output.target='text' reads an iofeed dataset preprocessed with --target text, "
                              f"not {'a Mix' if mixture else 'a folder'}")
        captions = open_captions(path, options.split, data, workers=options.output.tokenizer is not None)
        targets = open_targets(path, options.split, data) if options.output.extras else None
    elif options.output.target != "class" or options.output.extras:
        targets = mixture.targets() if mixture else open_targets(path, options.split, data)
    loaded: Loader[Any] = Loader(data, spec, make_engine(options, data), adapter, options, targets, mixture, boxes,
                                 captions)
    # what "auto" decided, and what the engine chose (the workers': which JPEG decode)
    loaded.stats.fixed["decisions"] = [*choice_notes(options, engine_name(options, data), data),
                                       *getattr(loaded.engine, "notes", [])]
    read = read_from(path) if mixture is None else [read_from(name) for name in mixture.names]
    loaded.stats.fixed["source"] = read  # what `iofeed doctor` checks: the data really read
    asked = {name: json_value(value) for name, value in options.keywords().items()}  # by loader() keyword
    loaded.stats.fixed["options"] = asked  # what it was asked for, beside what the engine made of it
    wrapped = adapter.wrap(loaded)
    check_batch_transform(loaded)  # a Normalize on top of the loader's own, where iofeed can see one
    if options.framework == "torch":
        check_torch_model(loaded)  # a LightningModule building its loaders in setup() / *_dataloader()
    return wrapped
