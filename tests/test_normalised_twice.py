"""One warning when images are normalised twice where iofeed can see it (issue 38: a torch script
that kept its own `Normalize` trained on values around −11…10, silently; Keras had a check, torch
none)."""
from __future__ import annotations

import warnings

import pytest

import iofeed

pytestmark = pytest.mark.torch
SIZE = 32
MEAN, STD = [0.485, 0.456, 0.406], [0.229, 0.224, 0.225]


def _caught(run) -> list[str]:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        run()
    return [str(w.message) for w in caught if "normalis" in str(w.message)]


def _two_batches(data) -> None:
    with data:
        for _, (images, _) in zip(range(2), data):
            assert images.shape[1] == 3


def _loader(dataset, **keywords):
    return iofeed.loader(dataset, batch_size=4, image_size=SIZE, framework="torch", workers=1, **keywords)


def test_a_normalize_in_the_batch_transform_warns_once_naming_it(colour_dataset):
    from torchvision.transforms import v2

    twice = v2.Compose([v2.RandomHorizontalFlip(), v2.Normalize(MEAN, STD)])
    said = _caught(lambda: _two_batches(_loader(colour_dataset, batch_transform=twice)))
    assert len(said) == 1, said
    assert "batch_transform= holds Normalize" in said[0] and "pixels='0-1'" in said[0], said
    assert _caught(lambda: _two_batches(_loader(colour_dataset, batch_transform=twice,
                                                output=iofeed.Output(pixels="0-1")))) == [], \
        "0-1 floats then Normalize: what torchvision scripts do, said nothing"


def test_a_torch_model_holding_a_normalize_warns_when_it_reads_the_loader(colour_dataset):
    import torch
    from torchvision import transforms

    class Normalising(torch.nn.Module):
        """A model that normalises its own input, reading its data in one of its methods."""

        def __init__(self):
            super().__init__()
            self.prep = torch.nn.Sequential(transforms.Normalize(MEAN, STD))
            self.head = torch.nn.Conv2d(3, 4, 3)

        def forward(self, x):
            return self.head(self.prep(x))

        def fit(self, data):
            with data:
                for _, (images, _) in zip(range(2), data):
                    self(images if images.is_floating_point() else images / 255)  # uint8: the script's scale

    model = Normalising()
    said = _caught(lambda: model.fit(_loader(colour_dataset)))
    assert len(said) == 1 and "model Normalising holds Normalize (prep.0" in said[0], said
    assert _caught(lambda: model.fit(_loader(colour_dataset, output=iofeed.Output(pixels="0-1")))) == []
    assert _caught(lambda: model.fit(_loader(colour_dataset, augment="uint8"))) == []


def test_a_lightning_module_building_its_loader_in_setup_is_seen(colour_dataset):
    pl = pytest.importorskip("pytorch_lightning")
    from torchvision import transforms

    class Module(pl.LightningModule):
        def __init__(self):
            super().__init__()
            self.normalize = transforms.Normalize(MEAN, STD)

        def setup(self, stage):
            self.train_loader = _loader(colour_dataset)

    module = Module()
    said = _caught(lambda: module.setup("fit"))
    module.train_loader.close()
    assert len(said) == 1 and "model Module holds Normalize (normalize" in said[0], said


def _own_normalise(images, labels):
    """A script's `(x - mean) / std` as a batch transform: iofeed cannot name it, its values show it."""
    import torch

    mean = torch.tensor(MEAN, device=images.device).view(1, 3, 1, 1)
    std = torch.tensor(STD, device=images.device).view(1, 3, 1, 1)
    return (images - mean) / std, labels


def test_a_batch_transform_whose_values_show_a_second_normalisation_warns(colour_dataset):
    said = _caught(lambda: _two_batches(_loader(colour_dataset, batch_transform=_own_normalise)))
    assert len(said) == 1 and "far beyond -2.1…2.6 of iofeed's normalisation" in said[0].replace("−", "-"), said


def test_mixup_and_random_erasing_noise_are_not_taken_for_a_second_normalisation(colour_dataset):
    from torchvision.transforms import v2

    augment = v2.Compose([v2.RandomErasing(p=1.0, value="random"), v2.MixUp(num_classes=4)])
    assert _caught(lambda: _two_batches(_loader(colour_dataset, batch_transform=augment))) == []
