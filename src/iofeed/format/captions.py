"""Captions on disk (`targets.kind` "text"): each split's `<split>-captions.npz`, every row's caption
as UTF-8 bytes back to back (`data`, uint8) with row i at `data[offsets[i]:offsets[i + 1]]`, and the
manifest's `targets.captions` entry that names the files and the layout's version."""
from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import DatasetError

CAPTIONS_VERSION = 1  # the side file's layout; a reader refuses a later one (`check_captions_entry`)
CAPTION_MEMBER = "txt"  # each sample's caption in its shard too, as WebDataset readers expect it


def captions_entry(files: dict[str, str]) -> dict[str, Any]:
    """The manifest's `targets.captions` entry for each split's captions file."""
    return {"version": CAPTIONS_VERSION, "files": dict(files)}


def check_captions_entry(entry: Any) -> None:
    """ValueError naming the field when `targets.captions` is not one this iofeed reads."""
    if not isinstance(entry, dict):
        raise ValueError(f'"targets.captions" must be an object, got {json.dumps(entry)[:40]}')
    version = entry.get("version")
    if not isinstance(version, int) or isinstance(version, bool) or not 1 <= version <= CAPTIONS_VERSION:
        raise ValueError(f'"targets.captions.version" must be 1..{CAPTIONS_VERSION}, got {json.dumps(version)[:40]} '
                         "(a later iofeed wrote it: upgrade iofeed)")
    files = entry.get("files")
    if not isinstance(files, dict) or not all(isinstance(v, str) for v in files.values()):
        raise ValueError(f'"targets.captions.files" must map splits to file names, got {json.dumps(files)[:40]}')


def save_captions(directory: Path, split: str, captions: list[str]) -> str:
    """Write one split's captions (in table row order); return the file's name."""
    encoded = [text.encode("utf-8") for text in captions]
    offsets = np.zeros(len(encoded) + 1, np.int64)
    offsets[1:] = np.cumsum([len(b) for b in encoded])
    data = np.frombuffer(b"".join(encoded), np.uint8)
    name = f"{split}-captions.npz"
    with open(Path(directory) / name, "wb") as f:
        np.savez(f, offsets=offsets, data=data)
    return name


def load_captions(where: Path | str, rows: int, content: bytes | None = None) -> tuple[np.ndarray, np.ndarray]:
    """(offsets, data) of the captions file at `where` (or its `content`, fetched from a URL) of
    `rows` rows; DatasetError naming it when unreadable, of another row count, or holding bytes
    that are not UTF-8."""
    try:
        with np.load(where if content is None else io.BytesIO(content), allow_pickle=False) as found:
            offsets, data = np.asarray(found["offsets"], np.int64), np.asarray(found["data"], np.uint8)
    except (OSError, KeyError, ValueError) as exc:
        raise DatasetError(f"cannot read {where}: {exc} (run `iofeed preprocess` again)") from None
    if (len(offsets) != rows + 1 or offsets[0] != 0 or offsets[-1] != len(data)
            or bool(np.any(np.diff(offsets) < 0))):
        raise DatasetError(f"{where} does not match the split's {rows} samples (run `iofeed preprocess` again)")
    try:
        data.tobytes().decode("utf-8")  # once here, so no batch meets a broken caption
    except UnicodeDecodeError as exc:
        raise DatasetError(f"{where}: byte {exc.start} is not UTF-8 (run `iofeed preprocess` again)") from None
    return offsets, data


def caption_at(offsets: np.ndarray, data: np.ndarray, row: int) -> str:
    """Row `row`'s caption."""
    return data[int(offsets[row]):int(offsets[row + 1])].tobytes().decode("utf-8")
