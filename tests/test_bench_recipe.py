"""`iofeed bench`'s recipe feed pair: torchvision's reference recipe in the DataLoader and in
iofeed, both yielding normalised images and MixUp/CutMix soft labels, in the same table."""
from __future__ import annotations

import json

import pytest

from helpers.images import make_colour_tree
from iofeed.cli.bench.feeds import CATALOGUE, FeedSpec, open_feed
from iofeed.cli.bench.schema import validate
from iofeed.cli.main import main

SIZE, BATCH, CLASSES = 64, 8, 4


@pytest.mark.torch
@pytest.mark.torchvision
@pytest.mark.parametrize("name", ["torchvision-recipe", "iofeed-recipe"])
def test_recipe_feeds_yield_augmented_batches_with_soft_labels(name, colour_tree, colour_dataset):
    import torch

    source = colour_dataset if name.startswith("iofeed") else colour_tree
    feed = open_feed(FeedSpec(name, str(source), 2, BATCH, SIZE, "cpu", classes=CLASSES))
    try:
        stream = feed.batches()
        batches = [next(stream) for _ in range(3)]
    finally:
        stream.close()
        feed.close()
    for images, labels in batches:
        assert images.shape == (BATCH, 3, SIZE, SIZE) and images.dtype == torch.float32
        assert labels.shape == (BATCH, CLASSES) and torch.allclose(labels.sum(1), torch.ones(BATCH))
        assert -3 < float(images.mean()) < 3  # normalised, not 0-255
    assert any(not torch.equal(labels, labels.round()) for _, labels in batches), "MixUp/CutMix ran"
    assert {"torchvision-recipe", "iofeed-recipe"} <= set(CATALOGUE)


@pytest.mark.torch
@pytest.mark.torchvision
@pytest.mark.slow
def test_the_pair_is_in_the_same_table_and_plot(tmp_path, capsys):
    tree = make_colour_tree(tmp_path / "tree", per_class=10)
    out = tmp_path / "res" / "bench.json"
    code = main(["bench", str(tree), "--feeds", "torchvision-recipe,iofeed-recipe", "--seconds", "0.6",
                 "--model", "none", "--batch-size", str(BATCH), "--image-size", str(SIZE), "--rounds", "2",
                 "--warmup", "0", "--json", str(out)])
    printed = capsys.readouterr()
    assert code == 0, printed.err
    record = json.loads(out.read_text())
    assert validate(record) == [] and out.with_suffix(".png").read_bytes()[:4] == b"\x89PNG"
    assert [f["name"] for f in record["feeds"]] == ["torchvision-recipe", "iofeed-recipe"]
    assert all(f["status"] == "ok" and f["images"] > 0 and f["name"] in printed.out for f in record["feeds"])
