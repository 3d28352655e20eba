"""What `iofeed bench --task detection` reads: a COCO folder (instances JSON + JPEG images) for
torchvision's CocoDetection, and its iofeed dataset (FOLDER.iof, preprocessed once with every image
in the train split, so that both sides read the same images). Without a SOURCE, the COCO-shaped
stand-in in data/coco-standin, made by `iofeed synth coco` if missing."""
from __future__ import annotations

from pathlib import Path

from ...errors import SourceError
from ...format.manifest import Manifest
from ...prepare.sources.coco import coco_files
from ...sources.samples import is_iofeed_dataset
from .inputs import Inputs, preprocessed_path
from .options import DEFAULT_COCO

# what each side of a detection pair does, said in the record, the table and docs/benchmarks.md
WHAT_EACH_DOES = (
    "detection pairs: torchvision's CocoDetection opens each JPEG file of the COCO folder (PIL) and decodes every"
    " object's mask at the image's size (pycocotools); iofeed reads the same images from its preprocessed shards "
    "at the stored size (where preprocess kept a JPEG byte for byte, as the stand-in's, under its 800 px shorter "
    "side, the same bytes are decoded), moves boxes once per batch and keeps masks as one instance-id map per "
    "image until it splits them at the end; both: the same workers, batch size, random-resized crop, flip, square"
    " resize and normalisation, boxes dropped when (almost) cropped away (torchvision: SanitizeBoundingBoxes; "
    "iofeed: less than 25% of a box left)")
STANDIN_IMAGES = 400  # ~30 MiB: made in ~15 s, preprocessed in ~10 s on 2 cores; an epoch is several windows' worth


def resolve_coco(source: Path | None, needed: set[str], progress: bool = True, images: int = STANDIN_IMAGES) -> Inputs:
    """The COCO folder and its dataset for `source` (a COCO folder, or an iofeed dataset made from
    one), making the stand-in (no `source`) or the dataset (when a feed `needed` it) if missing."""
    notes: list[str] = []
    if source is None:
        source = DEFAULT_COCO
        if not source.exists():
            from ...prepare.synth_coco import synth_coco

            print(f"iofeed bench: no SOURCE given and {source} is missing: making the COCO stand-in there "
                  f"({images} images)")
            made = synth_coco(source, images=images)
            notes.append(f"made the COCO stand-in ({made.images} images, {made.annotations} objects) in {source} "
                         f"in {made.seconds:.0f} s")
    source = Path(source)
    if is_iofeed_dataset(source):
        manifest = Manifest.read(source)
        if manifest.source.get("kind") != "coco":
            raise SourceError(f"{source} was not made from a COCO folder (kind {manifest.source.get('kind')!r}): "
                              "--task detection reads a COCO folder or its iofeed dataset")
        folder = Path(manifest.source.get("path", ""))
        inputs = Inputs(folder if coco_files(folder) else None, source, notes=notes)
        if inputs.folder is None:
            inputs.missing["folder"] = f"the dataset's COCO folder {folder} is gone"
        return inputs
    if not source.is_dir() or not coco_files(source):
        raise SourceError(f"{source}: no COCO instances JSON at its top or in annotations/ (--task detection reads "
                          "a COCO folder or its iofeed dataset; `iofeed synth coco DIR` makes a stand-in)")
    inputs = Inputs(source, None, notes=notes)
    dataset = preprocessed_path(source, "dataset")
    if is_iofeed_dataset(dataset):
        inputs.dataset = dataset
    elif "dataset" in needed:
        from ...prepare.run import preprocess

        print(f"iofeed bench: preprocessing {source} into {dataset} (once; every image in the train split)")
        summary = preprocess(source, dataset, val_fraction=0.0, progress=progress)
        notes.append(f"preprocessed {source} into {dataset} in {summary.seconds:.0f} s")
        inputs.dataset = dataset
    else:
        inputs.missing["dataset"] = f"{dataset} does not exist (no selected feed needs it)"
    inputs.missing["raw"] = "--task detection has no raw-pixel feed"
    return inputs
