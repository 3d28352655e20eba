"""The loader's captions (`Output(target="text")`): a split's `<split>-captions.npz` by sample index,
looked up in the main process for each batch; with a tokenizer, handed to the workers with the
source (two arrays: no Python object per caption crosses a process)."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..errors import OptionError
from ..format.captions import load_captions
from .samples import SampleSource


@dataclass
class CaptionTable:
    """Sample i's caption is `data[offsets[i]:offsets[i + 1]]`, UTF-8."""

    offsets: np.ndarray  # int64 (n + 1,)
    data: np.ndarray  # uint8

    def texts(self, samples: np.ndarray) -> list[str]:
        """The captions of `samples`, in batch order."""
        raw, offsets = self.data, self.offsets
        return [raw[offsets[s]:offsets[s + 1]].tobytes().decode("utf-8") for s in samples.tolist()]


def open_captions(dataset: str | Path, split: str, data: SampleSource, workers: bool) -> CaptionTable:
    """The split's captions; with `workers` (a tokenizer to run there) also set on `data` for them.
    OptionError when the dataset holds none (preprocessed without `--target text`)."""
    entry = data.targets.get("captions") or {}
    name = (entry.get("files") or {}).get(split)
    if name is None:
        raise OptionError(f"{dataset} holds no captions for split {split!r}: preprocess image-text shards with "
                          "`iofeed preprocess SHARDS -o OUT --target text` for Output(target='text')")
    offsets, raw = load_captions(Path(dataset) / name, len(data))
    if workers:
        data.captions = (offsets, raw)
    return CaptionTable(offsets, raw)
