"""docs/frameworks/: one page per framework, each saying its default in its first line and naming
tests that exist, and each page's lines run as written, in the namespace the real script has there,
on a stand-in of its data layout whose pixels say their class."""
from __future__ import annotations

import os
import re
import sys
from pathlib import Path

import pytest

import iofeed

ROOT = Path(__file__).resolve().parents[1]
PAGES = ("torch", "lightning", "timm", "keras", "jax", "tf")


@pytest.mark.parametrize("name", PAGES)
def test_each_framework_page_starts_with_its_default_and_names_real_tests(name):
    text = (ROOT / "docs" / "frameworks" / f"{name}.md").read_text()
    first = text.split("\n\n", 2)[1]
    assert first.startswith("**Default:"), first[:80]
    tests = set(re.findall(r"tests/(test_\w+\.py)", text))
    assert tests and all((ROOT / "tests" / t).exists() for t in tests), tests


def test_the_readme_links_every_page():
    readme = (ROOT / "README.md").read_text()
    assert all(f"docs/frameworks/{name}.md" in readme for name in PAGES)


# Every page's lines, run as written on a stand-in of the script's data layout (issue 38).

NAMES = ["class_a", "class_b", "class_c", "class_d"]  # class folders, numbered in this (sorted) order
RUN = {  # (page, section) whose blocks from the first iofeed call on are run by a test below
    ("torch", "What the script does, and the lines to change"),
    ("torch", "torchvision's classification references: their flags in one call"),
    ("lightning", "What the template does, and the lines to change"),
    ("timm", "The script's flags in one call"),
    ("timm", "What train.py does, and the lines to change"),
    ("timm", "Your own steps through `transform=` / `batch_transform=`"),
    ("keras", "What the example does, and the lines to change"),
    ("jax", "What the example does, and the lines to change"),
    ("jax", "pmap"),
    ("jax", "Batch sizes and layout"),
    ("tf", "The lines to change"),
}


def test_every_block_that_calls_iofeed_is_in_a_section_a_test_runs():
    from helpers.framework_docs import page

    for name in PAGES:
        sections = page(name).split("\n## ")[1:]
        for section in sections:
            heading = section.split("\n", 1)[0]
            blocks = re.findall(r"```python\n(.*?)```", section, re.S)
            if any("iofeed" in b for b in blocks):
                assert (name, heading) in RUN, f"{name}.md, {heading!r}: its iofeed lines run in no test"


def _layout(root: Path, val: str = "val", per_class: int = 6) -> Path:
    from helpers.framework_docs import make_class_folders

    make_class_folders(root / "train", NAMES, per_class)
    make_class_folders(root / val, NAMES, 3)
    return root


def _check_torch_loaders(train, val, sampler, batch_size: int, size: int = 224) -> None:
    """An epoch of `train` whose labels match their pixels, `val` read whole, each sample once."""
    import numpy as np

    from helpers.framework_docs import classes_of, torch_pixels

    with train, val:
        sampler.set_epoch(1)
        batches = 0
        for images, labels in train:
            assert tuple(images.shape) == (batch_size, 3, size, size)
            assert (classes_of(torch_pixels(images), len(NAMES)) == labels.numpy()).all()
            batches += 1
        assert batches == len(train) > 0
        seen = []
        for images, labels in val:
            assert (classes_of(torch_pixels(images), len(NAMES)) == labels.numpy()).all()
            seen += labels.tolist()
        assert sorted(seen) == sorted(np.repeat(range(len(NAMES)), 3).tolist()), "the val split, each sample once"
        assert len(val.dataset) == len(seen) and len(val.dataset.classes) == len(NAMES)


@pytest.mark.torch
@pytest.mark.slow
def test_the_torch_page_runs_on_the_imagenet_examples_layout(tmp_path):
    """pytorch/examples' main.py: `args.data` holds `train/` and `val/` class folders; its
    `traindir`, `valdir` and `device` are defined before the lines the page replaces."""
    import argparse

    import torch

    from helpers.framework_docs import iofeed_blocks, run_bash, run_python

    data = _layout(tmp_path / "imagenet")
    args = argparse.Namespace(data=str(data), batch_size=4, workers=4, world_size=1, distributed=False, gpu=None)
    ns = {"iofeed": iofeed, "os": os, "torch": torch, "args": args, "device": torch.device("cpu"),
          "traindir": os.path.join(args.data, "train"), "valdir": os.path.join(args.data, "val")}
    (lang, lines), (bash_lang, bash), (_, retarget) = iofeed_blocks("torch", "What the script does, and the lines "
                                                                               "to change")
    assert (lang, bash_lang) == ("python", "bash")
    run_python(lines, ns, "torch.md")
    assert not len(ns["val_loader"].sampler) * args.world_size < len(ns["val_loader"].dataset), "validate()'s check"
    _check_torch_loaders(ns["train_loader"], ns["val_loader"], ns["train_sampler"], args.batch_size)
    assert len(run_bash(bash, tmp_path, {"DATA": str(data)})) == 2
    run_python(retarget, ns, "torch.md")
    run_python(lines, ns, "torch.md")  # the same lines on the preprocessed datasets
    assert ns["train_loader"].stats.settings["source"].endswith("train.iof")
    _check_torch_loaders(ns["train_loader"], ns["val_loader"], ns["train_sampler"], args.batch_size)


@pytest.mark.torch
@pytest.mark.slow
def test_the_torchvision_references_lines_keep_their_flags(tmp_path):
    import torch

    from helpers.framework_docs import classes_of, iofeed_blocks, torch_pixels
    from helpers.script_parsers import torchvision_train_parser

    data = _layout(tmp_path / "imagenet")
    args = torchvision_train_parser().parse_args([
        "--data-path", str(data), "-b", "4", "--device", "cpu", "--auto-augment", "ta_wide", "--random-erase", "0.25",
        "--mixup-alpha", "0.2", "--cutmix-alpha", "1.0", "--train-crop-size", "64", "--val-resize-size", "72",
        "--val-crop-size", "64"])
    ns = {"iofeed": iofeed, "os": os, "torch": torch, "args": args, "device": torch.device(args.device),
          "train_dir": os.path.join(args.data_path, "train"), "val_dir": os.path.join(args.data_path, "val")}
    ((lang, lines),) = iofeed_blocks("torch", "torchvision's classification references: their flags in one call")
    exec(compile(lines, "torch.md", "exec"), ns)  # noqa: S102 - the page's lines as written
    assert ns["num_classes"] == len(NAMES)
    with ns["data_loader"] as train, ns["data_loader_test"] as test:
        images, labels = next(iter(train))
        assert tuple(images.shape) == (4, 3, 64, 64) and tuple(labels.shape) == (4, len(NAMES)), "MixUp/CutMix"
        assert type(train.options.transform.transform).__name__ == "TrivialAugmentWide"
        for images, labels in test:  # evaluation: resize 72, centre crop 64, nothing random
            assert tuple(images.shape[1:]) == (3, 64, 64)
            assert (classes_of(torch_pixels(images), len(NAMES)) == labels.numpy()).all()


@pytest.mark.torch
@pytest.mark.slow
def test_the_lightning_page_runs_in_the_imagenet_templates_module(tmp_path):
    import textwrap

    import numpy as np
    import torch

    pl = pytest.importorskip("pytorch_lightning")
    from pytorch_lightning.strategies import ParallelStrategy

    from helpers.framework_docs import classes_of, iofeed_blocks, torch_pixels
    from iofeed.errors import LoaderStateError

    ((lang, methods),) = iofeed_blocks("lightning", "What the template does, and the lines to change")
    module = textwrap.dedent('''
        class ImageNetLightningModel(pl.LightningModule):
            def __init__(self, data_path, batch_size, workers):
                super().__init__()
                self.data_path, self.batch_size, self.workers = data_path, batch_size, workers
                self.model = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3, stride=8), torch.nn.AdaptiveAvgPool2d(1),
                                                 torch.nn.Flatten())
                self.seen = {"train": [], "val": []}

            def forward(self, x):
                return self.model(x)

            def training_step(self, batch, batch_idx):
                images, target = batch
                self.seen["train"].append((classes_of(torch_pixels(images), 4), target.numpy()))
                return torch.nn.functional.cross_entropy(self(images), target)

            def on_validation_epoch_start(self):
                self.seen["val"] = []

            def validation_step(self, batch, batch_idx):
                images, target = batch
                self.seen["val"].append((classes_of(torch_pixels(images), 4), target.numpy()))

            def configure_optimizers(self):
                return torch.optim.SGD(self.parameters(), lr=0.1)

        ''') + textwrap.indent(methods, "    ")
    module += "\n    def test_dataloader(self):\n        return self.val_dataloader()\n"  # the template's, unchanged
    ns = {"pl": pl, "torch": torch, "os": os, "iofeed": iofeed, "ParallelStrategy": ParallelStrategy,
          "classes_of": classes_of, "torch_pixels": torch_pixels}
    exec(compile(module, "lightning.md", "exec"), ns)  # noqa: S102 - the template with the page's methods
    model = ns["ImageNetLightningModel"](str(_layout(tmp_path / "imagenet")), batch_size=4, workers=2)
    trainer = pl.Trainer(max_epochs=2, accelerator="cpu", devices=1, logger=False, enable_checkpointing=False,
                         enable_progress_bar=False, enable_model_summary=False)
    trainer.fit(model)
    assert len(model.seen["train"]) == 2 * (4 * 6 // 4)
    for found, labels in model.seen["train"] + model.seen["val"]:
        assert (found == labels).all(), "labels match their pixels"
    val = np.concatenate([labels for _, labels in model.seen["val"]])
    assert sorted(val.tolist()) == sorted(np.repeat(range(4), 3).tolist()), "the last validation read the split"
    with pytest.raises(LoaderStateError):
        next(iter(model.train_loader))  # teardown() closed it


@pytest.mark.torch
@pytest.mark.timm
@pytest.mark.slow
def test_the_timm_page_runs_with_train_pys_flags_on_its_layout(tmp_path, monkeypatch):
    import timm
    import torch

    from helpers.framework_docs import classes_of, iofeed_blocks, run_python, torch_pixels, write_module
    from helpers.script_parsers import timm_args

    data = _layout(tmp_path / "imagenet", val="validation")
    args = timm_args([str(data), "-b", "4", "--input-size", "3", "64", "64", "--train-interpolation", "bicubic",
                      "--no-prefetcher", "--aa", "rand-m9-mstd0.5-inc1", "--reprob", "0.25"])
    ns = {"iofeed": iofeed, "os": os, "timm": timm, "torch": torch, "args": args, "device": torch.device("cpu"),
          "model": timm.create_model("resnet18", pretrained=False, num_classes=len(NAMES))}
    ((_, config),) = iofeed_blocks("timm", "The script's flags in one call")
    run_python(config, ns, "timm.md")
    assert set(ns["keywords"]) == {"augment", "transform", "batch_transform"} and ns["data_config"]["input_size"] == (
        3, 64, 64)
    ((_, loaders),) = iofeed_blocks("timm", "What train.py does, and the lines to change")
    run_python(loaders, ns, "timm.md")
    with ns["loader_train"] as train, ns["loader_eval"] as evaluation:
        images, labels = next(iter(train))
        assert tuple(images.shape) == (4, 3, 64, 64)
        assert type(train.options.transform.transform).__name__ == "RandAugment"
        seen = 0
        for images, labels in evaluation:
            assert (classes_of(torch_pixels(images), len(NAMES)) == labels.numpy()).all()
            seen += len(labels)
        assert seen == 3 * len(NAMES)
    (_, module), (_, own) = iofeed_blocks("timm", "Your own steps through `transform=` / `batch_transform=`")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setenv("PYTHONPATH", f"{tmp_path}{os.pathsep}{os.environ.get('PYTHONPATH', '')}")
    assert write_module(module, tmp_path) == "timm_augment"
    try:
        run_python(own, ns, "timm.md")
        with ns["loader_train"] as train:
            images, labels = next(iter(train))
            assert tuple(images.shape) == (4, 3, 64, 64) and tuple(labels.shape) == (4, 1000), "Mixup's soft labels"
    finally:
        sys.modules.pop("timm_augment", None)


@pytest.mark.jax
@pytest.mark.slow
def test_the_jax_page_runs_with_the_flax_examples_names(tmp_path):
    import argparse

    import jax
    import jax.numpy as jnp
    import numpy as np

    from helpers.framework_docs import CODES, iofeed_blocks, make_class_folders, run_python, section_blocks
    from helpers.pixelcode import colour
    from iofeed.prepare.run import preprocess

    make_class_folders(tmp_path / "images", NAMES, 6)
    dataset = preprocess(tmp_path / "images", tmp_path / "imagenet.iof", val_per_class=2, progress=False,
                         workers=1).out
    mean, std = jnp.array([0.485, 0.456, 0.406]) * 255, jnp.array([0.229, 0.224, 0.225]) * 255
    palette = jnp.array([colour(CODES[i]) for i in range(len(NAMES))], jnp.float32)

    def predict(images):  # the class of each normalised image's mean colour
        means = (images * std + mean).mean(axis=(1, 2))
        return jnp.abs(means[:, None, :] - palette[None]).sum(axis=2).argmin(axis=1)

    ns = {"iofeed": iofeed, "jax": jax, "config": argparse.Namespace(data=str(dataset)), "local_batch_size": 4,
          "image_size": 32, "step_offset": 0, "num_steps": 5, "state": jnp.zeros((jax.local_device_count(),)),
          "p_train_step": jax.pmap(lambda state, batch: (state + 1, (predict(batch["image"]) == batch["label"]).all())),
          "eval_step": jax.jit(lambda state, images, labels, mask: ((predict(images) == labels) & mask).sum()),
          "correct": 0, "count": 0}
    ((_, lines),) = iofeed_blocks("jax", "What the example does, and the lines to change")
    run_python(lines, ns, "jax.md")
    for _step, batch in zip(range(ns["step_offset"], ns["num_steps"]), ns["train_iter"]):  # the example's loop
        assert batch["image"].shape == (4, 32, 32, 3) and bool((predict(batch["image"]) == batch["label"]).all())
    ((_, pmap),) = section_blocks("jax", "pmap")  # the page's lines around the loader's batches
    run_python(pmap, ns, "jax.md")
    assert float(ns["state"][0]) == 5 and bool(ns["metrics"].all())
    ns["val"] = iofeed.loader(str(dataset), split="val", batch_size=4, image_size=32, framework="jax")
    ((_, evaluation),) = section_blocks("jax", "Batch sizes and layout")
    with ns["train"], ns["val"]:
        run_python(evaluation, ns, "jax.md")
    assert int(ns["count"]) == int(ns["correct"]) == 2 * len(NAMES), "every val sample scored once, each right"
    assert isinstance(ns["correct"], jax.Array) and np.ndim(ns["correct"]) == 0


@pytest.mark.tf
@pytest.mark.slow
def test_the_tf_page_runs_on_the_flower_photos_layout(tmp_path):
    import tensorflow as tf

    from helpers.framework_docs import classes_of, iofeed_blocks, make_class_folders, run_bash, run_python

    flowers = ["daisy", "dandelion", "roses", "sunflowers", "tulips"]
    make_class_folders(tmp_path / "flower_photos", flowers, 14)
    (tmp_path / "flower_photos" / "LICENSE.txt").write_text("All images in this archive are licensed ...\n")
    (_, bash), (_, lines) = iofeed_blocks("tf", "The lines to change")
    run_bash(bash, tmp_path)
    assert "LICENSE.txt" in (tmp_path / "flowers.iof" / "rejected.jsonl").read_text()
    ns = {"iofeed": iofeed, "batch_size": 32, "img_height": 180, "img_width": 180}
    before = Path.cwd()
    os.chdir(tmp_path)
    try:
        run_python(lines, ns, "tf.md")
    finally:
        os.chdir(before)
    train_ds, val_ds = ns["train_ds"], ns["val_ds"]
    assert list(ns["class_names"]) == flowers
    model = tf.keras.Sequential([tf.keras.Input((180, 180, 3)), tf.keras.layers.Rescaling(1. / 255),
                                 tf.keras.layers.Conv2D(4, 3, strides=8, activation="relu"),
                                 tf.keras.layers.GlobalAveragePooling2D(), tf.keras.layers.Dense(len(flowers))])
    model.compile(optimizer="adam", loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    with train_ds.iofeed_loader, val_ds.iofeed_loader:
        history = model.fit(train_ds, validation_data=val_ds, epochs=1, verbose=0)
        assert len(history.history["val_loss"]) == 1
        for images, labels in val_ds:
            assert images.shape[1:] == (180, 180, 3) and float(tf.reduce_max(images)) > 1, "0-255, as Rescaling expects"
            assert (classes_of(images.numpy(), len(flowers)) == labels.numpy()).all()


@pytest.mark.keras
@pytest.mark.jax
@pytest.mark.slow
def test_the_keras_page_runs_on_the_pet_images_layout_on_jax(tmp_path):
    from helpers.keras_fit import run_on_backend

    got = run_on_backend("helpers.keras_doc", tmp_path, tmp_path / "keras_doc.json", "jax")
    assert got["epochs"] == 2 and got["val_seen"] == got["val_samples"] > 0, got
    assert got["labels_match"] and got["max_pixel"] > 1, "labels match their 0-255 pixels"
