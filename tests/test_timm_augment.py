"""timm's own augmentations through iofeed, as docs/frameworks/timm.md shows them: RandAugment as a
per-sample `transform=` in the workers, RandomErasing + Mixup as a `batch_transform=`, the recipe
from a real timm model's data config; seeded, so 1 and 2 workers give the same pixels."""
from __future__ import annotations

import sys
import textwrap

import numpy as np
import pytest

import iofeed

pytestmark = [pytest.mark.timm, pytest.mark.torch]

MODULE = '''
import numpy as np
from PIL import Image
from timm.data.auto_augment import rand_augment_transform
from timm.data.mixup import Mixup
from timm.data.random_erasing import RandomErasing

_rand = rand_augment_transform("rand-m9-mstd0.5-inc1", {"img_mean": (124, 116, 104)})
_erase = RandomErasing(probability=0.25, mode="pixel", device="cpu")
_mix = Mixup(mixup_alpha=0.8, cutmix_alpha=1.0, label_smoothing=0.1, num_classes=NUM_CLASSES)


def rand_augment(image):
    return np.asarray(_rand(Image.fromarray(image)))


def erase_and_mix(images, labels):
    return _mix(_erase(images), labels)
'''


@pytest.fixture()
def timm_augment(tmp_path, monkeypatch, colour_dataset):
    with iofeed.loader(colour_dataset, batch_size=2, workers=1) as ld:
        classes = len(ld.dataset.classes)
    (tmp_path / "timm_augment_example.py").write_text(textwrap.dedent(MODULE).replace("NUM_CLASSES", str(classes)))
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setenv("PYTHONPATH", f"{tmp_path}:{__import__('os').environ.get('PYTHONPATH', '')}")
    import timm_augment_example

    yield timm_augment_example, classes
    sys.modules.pop("timm_augment_example", None)


def _epoch(colour_dataset, module, workers: int) -> list[tuple[np.ndarray, np.ndarray]]:
    import timm

    model = timm.create_model("resnet18", pretrained=False, num_classes=4)
    config = timm.data.resolve_data_config({"input_size": (3, 48, 48)}, model=model)
    with iofeed.loader(colour_dataset, batch_size=4, framework="torch", workers=workers, seed=3,
                       augment=iofeed.Recipe.from_timm(config), transform=module.rand_augment,
                       batch_transform=module.erase_and_mix) as ld:
        return [(images.numpy().copy(), labels.numpy().copy()) for images, labels in ld]


def test_timm_rand_augment_erasing_and_mixup_run_through_iofeed_and_are_seeded(colour_dataset, timm_augment):
    module, classes = timm_augment
    one, two = _epoch(colour_dataset, module, 1), _epoch(colour_dataset, module, 2)
    assert len(one) == len(two) > 0
    for (images, soft), (images2, soft2) in zip(one, two, strict=True):
        assert images.shape == (4, 3, 48, 48) and images.dtype == np.float32
        assert soft.shape == (4, classes) and np.allclose(soft.sum(axis=1), 1.0, atol=1e-5), "Mixup's soft labels"
        np.testing.assert_array_equal(images, images2)  # same seed, same pixels, whatever the worker count
        np.testing.assert_array_equal(soft, soft2)
    assert any(not np.allclose(s.max(axis=1), 0.9 + 0.1 / classes) for _, s in one), "some batches were mixed"
