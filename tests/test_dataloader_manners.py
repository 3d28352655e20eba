"""DataLoader manners: the epoch hooks and attributes of pytorch/examples' ImageNet trainer, timm's
train.py and Lightning run unchanged on a Loader, and torch DataLoader's keyword arguments are
ignored only where that is right (otherwise refused in one line)."""
from __future__ import annotations

import numpy as np
import pytest

import iofeed
from helpers.images import label_from_pixels
from iofeed.errors import OptionError

OPTIONS = {"batch_size": 4, "image_size": 32, "workers": 1, "seed": 6}


def _epoch(ld) -> list[int]:
    seen = []
    for images, labels in ld:
        assert [label_from_pixels(image) for image in np.asarray(images)] == np.asarray(labels).tolist()
        seen += ld.last_indices.tolist()
    return seen


def test_the_epoch_hooks_of_classic_scripts_run_unchanged(colour_dataset):
    with iofeed.loader(colour_dataset, **OPTIONS) as fresh:
        expected = [_epoch(fresh) for _ in range(3)]
    with iofeed.loader(colour_dataset, **OPTIONS) as loader:
        got = []
        for epoch in range(3):
            if hasattr(loader.dataset, "set_epoch"):  # timm's train.py
                loader.dataset.set_epoch(epoch)
            loader.sampler.set_epoch(epoch)  # pytorch/examples (DistributedSampler), Lightning
            got.append(_epoch(loader))
        assert got == expected, "each hook names the epoch the loader was about to read anyway"
        loader.sampler.set_epoch(1)
        assert _epoch(loader) == expected[1], "an epoch named again is read again"
        assert len(loader.dataset) == 32 and len(loader.sampler) == 32
        assert loader.dataset.classes == ["colour0", "colour1", "colour2", "colour3"]
        assert loader.dataset.class_to_idx == {"colour0": 0, "colour1": 1, "colour2": 2, "colour3": 3}
        assert (loader.batch_size, loader.drop_last, loader.num_workers) == (4, True, 1)


def test_the_validation_check_of_pytorch_examples_finds_nothing_missing(colour_dataset):
    """pytorch/examples adds an auxiliary loader when `len(sampler) * world_size < len(dataset)`:
    iofeed drops no tail, so the check must stay false, by default (the shares padded) and with
    `pad="none"` (each sample once: what its validate(), summing on each rank, counts exactly)."""
    world = 3
    loaders = [iofeed.loader(colour_dataset, split="val", placement=iofeed.Placement(rank=r, world_size=world),
                             order=iofeed.Order(pad=pad),
                             **OPTIONS) for pad in ("ranks", "none") for r in range(world)]
    try:
        assert all(len(ld.sampler) * world >= len(ld.dataset) == 8 for ld in loaders)
        assert sorted(sum((_epoch(ld) for ld in loaders[world:]), [])) == list(range(8))
        assert all(ld.drop_last is False for ld in loaders)
    finally:
        for ld in loaders:
            ld.close()


def test_an_epoch_hook_right_after_a_resume_keeps_the_resume_point(colour_dataset):
    """Lightning and timm call set_epoch at every epoch's start, also the one a checkpoint resumes."""
    with iofeed.loader(colour_dataset, **OPTIONS) as ld:
        whole = _epoch(ld)
        ld.set_epoch(0)
        for k, _ in enumerate(ld, start=1):
            if k == 3:
                state = ld.state_dict()
                break
    with iofeed.loader(colour_dataset, **OPTIONS) as ld:
        ld.load_state_dict(state)
        ld.sampler.set_epoch(0)
        ld.dataset.set_epoch(0)
        assert _epoch(ld) == whole[12:]


def test_dataloader_flags_iofeed_already_honours_are_accepted(colour_dataset):
    with iofeed.loader(colour_dataset, pin_memory=True, persistent_workers=True, shuffle=True, **OPTIONS) as ld:
        shuffled = _epoch(ld)
    with iofeed.loader(colour_dataset, shuffle=False, **OPTIONS) as ld:
        assert _epoch(ld) == list(range(32)) != shuffled


@pytest.mark.parametrize(("option", "value", "named", "fix"), [
    ("prefetch_factor", 2, "prefetch_factor", "resources=iofeed.Resources(prefetch=N)"),
    ("collate_fn", list, "collate_fn", "batch_transform="),
    ("generator", object(), "generator", "seed="),
    ("pin_memory", "yes", "pin_memory", "True or False"),
    ("output", iofeed.Output(memory_format="channels_last"), "Output.memory_format", "framework='torch'"),
])
def test_dataloader_arguments_that_would_do_nothing_are_refused_in_one_line(colour_dataset, option, value, named,
                                                                              fix):
    with pytest.raises(OptionError) as info:
        iofeed.loader(colour_dataset, **{option: value}, **OPTIONS)
    message = str(info.value)
    assert named in message and fix in message and "\n" not in message
