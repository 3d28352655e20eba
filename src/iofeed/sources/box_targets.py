"""The loader's box targets: a split's stored boxes, labels, iscrowd and annotated sizes as flat
arrays by sample index (`<split>-boxes.npz`, main process only), and for `Output(target="masks")` each
sample's instance-mask member span handed to the workers with the source."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..errors import DatasetError, OptionError
from ..image.mask_rows import RowRuns
from ..image.masks import MASK_FORMS, decode_mask
from .sample_reader import SampleReader
from .samples import SampleSource


@dataclass
class BoxTable:
    """Sample i's boxes are `boxes[offsets[i]:offsets[i + 1]]` (float32 xyxy in stored pixels)."""

    offsets: np.ndarray  # int64 (n + 1,)
    boxes: np.ndarray  # float32 (m, 4)
    labels: np.ndarray  # int64 (m,)
    iscrowd: np.ndarray  # uint8 (m,)
    sizes: np.ndarray  # int64 (n, 2): the annotated image's width, height
    semantic: bool = False  # the masks are semantic label maps (class ids, no boxes)

    def gather(self, samples: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(per-sample counts, flat positions of their boxes in batch order), without a Python loop."""
        starts, ends = self.offsets[samples], self.offsets[samples + 1]
        counts = ends - starts
        first = np.repeat(starts - np.concatenate([[0], np.cumsum(counts)[:-1]]), counts)
        return counts, first + np.arange(int(counts.sum()))


def open_boxes(dataset: str | Path, split: str, data: SampleSource, masks: bool) -> BoxTable:
    """The split's box targets; with `masks`, the mask spans set on `data` for the workers.
    OptionError when the dataset holds none (made from a source without boxes)."""
    entry = data.targets.get("boxes") or {}
    name = entry.get("files", {}).get(split)
    if name is None:
        raise OptionError(f"{dataset} holds no boxes for split {split!r} (it was made from a source without them): "
                          "preprocess a COCO folder for Output(target='boxes')")
    where = Path(dataset) / name
    try:
        with np.load(where, allow_pickle=False) as found:
            table = BoxTable(found["offsets"], found["boxes"], found["labels"], found["iscrowd"], found["sizes"],
                             bool(entry.get("semantic")))
    except (OSError, KeyError, ValueError) as exc:
        raise DatasetError(f"cannot read {where}: {exc} (run `iofeed preprocess` again)") from None
    if len(table.offsets) != len(data) + 1 or table.offsets[-1] != len(table.boxes):
        raise DatasetError(f"{where} does not match the split's {len(data)} samples (run `iofeed preprocess` again)")
    if table.semantic and not masks:
        raise OptionError(f"{dataset} holds semantic segmentation masks, not boxes: use Output(target='masks')")
    if masks:
        mask_name = entry.get("masks", {}).get(split)
        if mask_name is None:
            raise OptionError(f"{dataset} holds boxes without masks: use Output(target='boxes') (its source had no "
                              "segmentations)")
        spans = np.load(Path(dataset) / mask_name, allow_pickle=False)
        if spans.shape != (len(data), 2):
            raise DatasetError(f"{Path(dataset) / mask_name} does not match the split's {len(data)} samples")
        form = entry.get("mask_form", "png")
        if form not in MASK_FORMS:
            raise DatasetError(f"{dataset} stores its masks as {form!r}, which this iofeed cannot read (one of "
                               f"{', '.join(MASK_FORMS)}): upgrade iofeed or run `iofeed preprocess` again")
        data.masks = spans.astype(np.int64)
    return table


def read_mask(reader: SampleReader, source: SampleSource, index: int) -> np.ndarray | RowRuns:
    """Sample `index`'s stored id map (in a worker), in the form the manifest names (PNG before
    decision 0165). SampleError when unreadable or not of the image's size."""
    assert source.masks is not None, "Output(target='masks') opens the dataset's mask spans"
    form = (source.targets.get("boxes") or {}).get("mask_form", "png")
    return decode_mask(reader.read(index, tuple(source.masks[index])), form, int(source.width[index]),
                       int(source.height[index]))
