"""The loaders under test ("feeds"), declared by what they run: one registry line each.

Every feed does the same work: 224 px random-resized-crop (area 0.08–1, ratio 3/4–4/3),
horizontal flip, ImageNet normalisation, batches of the same size, on the same device. The
recipe pair adds torchvision's reference recipe (`augment/recipe.py`); its labels are soft (MixUp/CutMix).
The detection pairs (`--task detection`, `detection.py`) read a COCO folder and its dataset: boxes
(and instance masks) moved with the crop, flip and resize, each iofeed line against torchvision's.
A line says which data form the feed reads, the settings its class is built with (for an iofeed
feed the `iofeed.loader` keywords, for a DataLoader feed its worker count and recipe), how the data
is given to it (`sources.py`) and what it needs; the classes (`feed_classes.py`) build from that alone.
"""
from __future__ import annotations

import importlib.util
from collections.abc import Generator, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from ...errors import FeedUnavailable
from ...options.groups import Output
from ...runtime.registry import Entry, Registry
from .options import TASKS

BASELINE = "torchvision-Nw"
RECIPE_BASELINE = "torchvision-recipe"  # what the recipe feeds are compared with: the same recipe, torchvision's way
CEILING = "synthetic"
DETECTION_BASELINE = "torchvision-coco-boxes"  # the detection record's headline baseline
GPU = "gpu"  # a need: a CUDA device (any other need is a module to import)
# why a feed lacking a need is skipped (any other module: "M is not installed")
SAID = {"nvidia.dali": "NVIDIA DALI is not installed (pip install 'iofeed[dali]')",
        GPU: "augments on the GPU: needs a CUDA GPU",
        "ffcv": "FFCV is not installed (pip install ffcv: an sdist that compiles against OpenCV and libjpeg-turbo "
                "found by pkg-config)",
        "pycocotools": "pycocotools is not installed (pip install pycocotools, in 'iofeed[bench]'): torchvision's "
                       "CocoDetection reads the instances JSON with it"}


@dataclass(frozen=True)
class FeedDecl:
    """What the catalogue says of a feed: what it runs, on which form of the data, and what it needs."""

    kind: str  # its family, as reported: "torchvision", "iofeed", "dali-peer", "grain", "ffcv" or "synthetic"
    reads: str  # "folder", "dataset" (JPEG), "raw" (raw pixels) or "" (synthetic)
    about: str
    keywords: Mapping[str, Any] = field(default_factory=dict)  # its class's settings: iofeed.loader keywords...
    framework: str = "torch"  # what it yields; other than torch: CPU only, no model, not in the default set
    workers: int | None = None  # a fixed worker count (otherwise `--workers`)
    source: str = ""  # how the data is given to it, from `sources.SOURCES` ("": as it is on disk)
    recipe: str = ""  # a recipe of `augment/recipe.py` instead of crop + flip ("": none); compared with RECIPE_BASELINE
    needs: tuple[str, ...] = ()  # modules it imports and GPU: a feed lacking one is skipped, saying which
    default: bool = True  # run without `--feeds` (when its framework is torch)
    task: str = TASKS[0]  # the `--task` (of `TASKS`) it runs under (detection: reads a COCO folder or its dataset)
    compared_with: str = ""  # the feed its ratio is against ("": BASELINE, or RECIPE_BASELINE for a recipe feed)


_HERE = "iofeed.cli.bench.feed_classes"
_FRAMEWORKS = "iofeed.cli.bench.framework_feeds"


def _recipe(**changes: Any) -> Any:
    """An `iofeed.Recipe` for a line's `augment=` (imported here: the catalogue loads before iofeed's loader)."""
    from ...augment.recipe import Recipe

    return Recipe(**changes)


CHANNELS_LAST = Output(memory_format="channels_last")  # the bench's model is channels_last
TORCH: dict[str, Any] = {"engine": "workers", "output": CHANNELS_LAST}  # the torch feeds' loader keywords


def iofeed(reads: str, about: str, *, target: str = f"{_HERE}:IofeedFeed", framework: str = "torch",
           source: str = "", recipe: str = "", needs: tuple[str, ...] = (), default: bool = True,
           task: str = "classification", compared_with: str = "", **keywords: Any) -> Entry[FeedDecl]:
    """An iofeed feed: `iofeed.loader(source, framework=framework, **keywords, **the run's)`."""
    return Entry(target, FeedDecl("iofeed", reads, about, {"framework": framework, **keywords}, framework,
                                  source=source, recipe=recipe, needs=needs, default=default, task=task,
                                  compared_with=compared_with))


def coco_pair(what: str, target: str) -> dict[str, Entry[FeedDecl]]:
    """The detection pair for `target` ("boxes" or "masks"): torchvision's CocoDetection + v2 recipe +
    DataLoader on the COCO folder, and `iofeed.loader(output=Output(target=target))` on its dataset."""
    baseline = f"torchvision-coco-{target}"
    masks = target == "masks"
    return {
        baseline: Entry("iofeed.cli.bench.detection:CocoDetectionFeed", FeedDecl(
            "torchvision", "folder", f"torchvision CocoDetection + wrap_dataset_for_transforms_v2 (pycocotools) on "
            f"the COCO folder's JPEGs, {what}: RandomResizedCrop (scale 0.3-1, ratio 1/2-2), flip, normalise, "
            "SanitizeBoundingBoxes, in the DataLoader, all cores", {"masks": masks}, needs=("pycocotools",),
            task="detection", compared_with=baseline)),
        f"iofeed-coco-{target}": iofeed(
            "dataset", f"iofeed workers engine on the COCO folder's dataset (the JPEGs in shards at the stored size), "
            f"Output(target={target!r}), augment='detection' (the same crop and flip): {what} moved per batch in "
            "flat arrays" + (", per-object masks split from the id map at the end" if masks else ""),
            task="detection", compared_with=baseline, engine="workers", output=Output(target=target),
            augment="detection"),
    }


def dataloader(about: str, *, workers: int | None = None, recipe: str = "") -> Entry[FeedDecl]:
    """A torchvision ImageFolder + DataLoader feed on the folder, with `workers` and `recipe`."""
    return Entry(f"{_HERE}:TorchvisionFeed", FeedDecl("torchvision", "folder", about, workers=workers, recipe=recipe))


def peer(target: str, kind: str, reads: str, about: str, *, framework: str = "torch", needs: tuple[str, ...] = (),
         default: bool = True, **keywords: Any) -> Entry[FeedDecl]:
    """Another library's loader (or the synthetic ceiling), built with `keywords`."""
    return Entry(target, FeedDecl(kind, reads, about, keywords, framework, needs=needs, default=default))


# Every feed, in table order; an entry's target is the feed class, built as `target(spec)`.
FEEDS: Registry[FeedDecl] = Registry("feed", {
    "torchvision-1w": dataloader("torchvision ImageFolder + DataLoader, 1 worker", workers=1),
    "torchvision-Nw": dataloader("torchvision ImageFolder + DataLoader, all cores"),
    "iofeed-folder": iofeed("folder", "iofeed workers engine on the JPEG folder", **TORCH),
    "iofeed-dataset": iofeed("dataset", "iofeed workers engine on the preprocessed dataset (channels_last)", **TORCH),
    "iofeed-nchw": iofeed("dataset", "the same in the torch adapter's default layout, contiguous NCHW: a layout that "
                          "cost a pass of its own would show beside iofeed-dataset", engine="workers"),
    "iofeed-exact-decode": iofeed("dataset", "iofeed workers engine on the preprocessed dataset, "
                                  "Recipe(fast_decode=False): libjpeg-turbo's exact IDCT and upsampling (the "
                                  "default before issue 42)", default=False, augment=_recipe(fast_decode=False),
                                  **TORCH),
    "iofeed-raw": iofeed("raw", "iofeed workers engine on the raw-pixel dataset (--format raw)", **TORCH),
    "iofeed-raw-gpu": iofeed("raw", "iofeed on the raw-pixel dataset, crop/resize/flip on the GPU", needs=(GPU,),
                             gpu_augment=True, **TORCH),
    "iofeed-s3-cold": iofeed("dataset", "iofeed workers engine streaming the dataset from a local S3 endpoint, "
                             "cache of 10% (shards fetched all along)", source="S3 cold", **TORCH),
    "iofeed-s3-warm": iofeed("dataset", "iofeed workers engine on the dataset's URL, every shard already in the "
                             "node cache", source="S3 warm", **TORCH),
    "iofeed-jax": iofeed("dataset", "iofeed workers engine on the preprocessed dataset, framework='jax' (sharded "
                         "jax.Array, NHWC)", target=f"{_FRAMEWORKS}:IofeedFrameworkFeed", framework="jax",
                         needs=("jax",)),
    "iofeed-tf": iofeed("dataset", "iofeed workers engine on the preprocessed dataset, framework='tf', one .repeat() "
                        "iterator", target=f"{_FRAMEWORKS}:IofeedFrameworkFeed", framework="tf", needs=("tensorflow",)),
    "iofeed-tf-epochs": iofeed("dataset", "iofeed's tf dataset, a new iterator each epoch (as Keras fit)",
                               target=f"{_FRAMEWORKS}:IofeedTfEpochsFeed", framework="tf", needs=("tensorflow",)),
    # Grain's best on 2 cores: read_threads (ReadOptions.num_threads) 0, buffer 2 (docs/benchmarks.md)
    "grain": peer("iofeed.cli.bench.grain_feed:GrainFeed", "grain", "dataset", "Grain DataLoader over the dataset's "
                  "JPEG bytes, Pillow decode", framework="numpy", needs=("grain",), worker_buffer_size=2,
                  read_threads=0),
    "ffcv": peer("iofeed.cli.bench.ffcv_feed:FfcvFeed", "ffcv", "dataset", "FFCV's ImageNet pipeline on the "
                 "dataset's train images written once into a .beton (JPEG q90, <= 256 px)", needs=("ffcv",),
                 default=False),
    "iofeed-mix": iofeed("dataset", "iofeed workers engine on a 3-source iofeed.Mix of the dataset (three names, "
                         "weights 0.5/0.3/0.2, an epoch of its size): what mixing costs beside iofeed-dataset",
                         source="mixed views", default=False, **TORCH),
    "iofeed-dali": iofeed("dataset", "iofeed DALI engine on the preprocessed dataset", needs=("nvidia.dali",),
                          engine="dali", output=CHANNELS_LAST),
    # its workers only read and pack JPEG bytes: "workers ms/img" is that cost (the target: <= 0.1 ms)
    "iofeed-nvjpeg": iofeed("dataset", "iofeed nvjpeg engine on the preprocessed dataset: workers pack JPEG bytes, "
                            "one batched decode per batch (nvJPEG on a GPU, libjpeg-turbo on the CPU), crop on the "
                            "device", needs=("torchvision",), engine="nvjpeg", output=CHANNELS_LAST),
    "torchvision-recipe": dataloader("torchvision reference recipe (TrivialAugmentWide, RandomErasing, MixUp/CutMix) "
                                     "in the DataLoader, all cores", recipe="reference"),
    "iofeed-recipe": iofeed("dataset", "the same recipe with iofeed: transform= in its workers, MixUp/CutMix as "
                            "batch_transform= on the device", recipe="reference", **TORCH),
    "dali-folder": peer("iofeed.cli.bench.dali_peer:DaliFolderFeed", "dali-peer", "folder", "plain DALI pipeline on "
                        "the JPEG folder", needs=("nvidia.dali",), prefetch_queue_depth=2),
    **coco_pair("boxes and labels", "boxes"),
    **coco_pair("boxes, labels and instance masks", "masks"),
    CEILING: peer(f"{_HERE}:SyntheticFeed", "synthetic", "", "synthetic tensors already on the device (the ceiling)"),
})


def baseline_of(name: str) -> str:
    """The feed a feed's ratio is against: the one its line names (the detection pairs: torchvision's
    feed of the same targets), the recipe feeds against each other (torchvision's recipe feed), every
    other feed against the plain DataLoader."""
    if name not in FEEDS:
        return BASELINE
    decl = FEEDS.caps(name)
    return decl.compared_with or (RECIPE_BASELINE if decl.recipe else BASELINE)


CATALOGUE = tuple(name for name in FEEDS.names() if name != CEILING)  # the feeds `--feeds` may name


def default_feeds(task: str) -> tuple[str, ...]:
    """The feeds a run of `task` measures without `--feeds`: its PyTorch feeds that are on by default."""
    return tuple(name for name in CATALOGUE if FEEDS.caps(name).task == task
                 and FEEDS.caps(name).framework == "torch" and FEEDS.caps(name).default)


DEFAULT_FEEDS = default_feeds("classification")  # without `--feeds` (or `--task`)


@dataclass(frozen=True)
class FeedSpec:
    """Everything a host process needs to build one feed (picklable)."""

    name: str
    source: str  # folder or dataset path ("" for synthetic)
    workers: int
    batch_size: int
    image_size: int
    device: str  # "cpu" or "cuda"
    seed: int = 0
    model: str = "none"
    classes: int = 1000
    endpoint: str = ""  # the local S3 endpoint of a streaming feed (`source` is then its URL)
    cache_root: str = ""  # the bench's own cache folder, where a streaming feed makes its cache

    @property
    def entry(self) -> FeedDecl:
        """What the catalogue says of this feed."""
        return FEEDS.caps(self.name)


class Feed(Protocol):
    """A running feed."""

    capacity: int  # batches it may hold ready before the consumer asks (its prefetch buffer)
    settings: dict[str, Any]

    def batches(self) -> Generator[tuple[Any, Any], None, None]:
        """(images float NCHW, labels int64) on the feed's device, epoch after epoch."""

    def close(self) -> None:
        """Stop workers and threads."""


def installed(module: str) -> bool:
    """Whether `module` (dotted: its parents too) can be imported, without importing it."""
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):  # a parent package missing, or a module stubbed out in sys.modules
        return False


def dali_installed() -> bool:
    """Whether NVIDIA DALI can be imported."""
    return installed("nvidia.dali")


def unmet(decl: FeedDecl, device: str) -> str | None:
    """Why a feed declared `decl` cannot run on `device` here (its first need missing), or None."""
    for need in decl.needs:
        if not (device == "cuda" if need == GPU else installed(need)):
            return SAID.get(need, f"{need} is not installed")
    return None


def open_feed(spec: FeedSpec) -> Feed:
    """Build the feed `spec` names (in the calling process); FeedUnavailable if it cannot run."""
    lacking = unmet(spec.entry, spec.device)
    if lacking is not None:
        raise FeedUnavailable(lacking)
    framework = spec.entry.framework
    if not (framework == "torch" or framework == "jax" and spec.device == "cuda") and (
            spec.device != "cpu" or spec.model != "none"):
        raise FeedUnavailable(f"a {framework} feed is measured on the CPU without a model only "
                              "(the model step is PyTorch's; JAX's GPU arrays reach it through DLPack)")
    feed: Feed = FEEDS[spec.name].load()(spec)
    return feed
