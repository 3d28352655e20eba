"""The loader's captions (`Output(target="text")`): a split's `<split>-captions.npz` (local, or read
once from a streamed dataset's URL) by sample index, looked up in the main process for each batch;
with a tokenizer, handed to the workers with the source (two arrays: no Python object per caption
crosses a process)."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import cast

import numpy as np

from ..errors import DatasetError, OptionError
from ..format.captions import load_captions
from .remote.urls import is_url
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
    where = f"{str(dataset).rstrip('/')}/{name}"
    offsets, raw = load_captions(where, len(data), _fetched(where) if is_url(where) else None)
    if workers:
        data.captions = (offsets, raw)
    return CaptionTable(offsets, raw)


def _fetched(url: str) -> bytes:
    """A streamed dataset's captions file (small beside its shards: read once, in the main process)."""
    from .remote.urls import filesystem

    try:
        return cast(bytes, filesystem(url).cat_file(url))
    except Exception as exc:  # noqa: BLE001 - storage errors of any library, named by URL
        raise DatasetError(f"cannot read {url}: {type(exc).__name__}: {exc}") from None
