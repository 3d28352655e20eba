"""Opening a source — an image folder or an iofeed dataset — as one flat table of samples."""
from __future__ import annotations

import mmap
import os
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from .errors import DatasetError, OptionError, SampleError, SourceError
from .format.manifest import MANIFEST_NAME, Manifest
from .format.table import RAW, load_table
from .prepare.scan import display_path, reason_kind, scan_folder


@dataclass
class SampleSource:
    """Samples as numpy arrays only: read `size` bytes at `offset` of `files[file_id]`.

    `size` is -1 for "the whole file" (image folders). `encoding` indexes `table.ENCODINGS`:
    raw samples are `height` x `width` x 3 uint8 pixels (width and height are 0 when unknown,
    as in image folders). Workers receive these arrays, never lists of Python objects.
    """

    files: np.ndarray  # bytes paths (numpy "S" array)
    file_id: np.ndarray  # int32
    offset: np.ndarray  # int64
    size: np.ndarray  # int64
    label: np.ndarray  # int64
    classes: list[str]
    kind: str  # "folder" or "dataset"
    encoding: np.ndarray  # uint8
    width: np.ndarray  # int32
    height: np.ndarray  # int32
    rejected: Counter = field(default_factory=Counter)  # reason kind -> count, found before loading
    dataset: Path | None = None  # the dataset directory (None for folders)
    dataset_id: str = ""  # the manifest's id when opened ("" for folders and datasets before version 3)

    def __len__(self) -> int:
        return len(self.label)

    def path_of(self, index: int) -> str:
        """A printable path naming sample `index` (with its offset inside a shard)."""
        path = display_path(self.files[self.file_id[index]].decode("utf-8", "surrogateescape"))
        return path if self.size[index] < 0 else f"{path}@{int(self.offset[index])}"

    def has_raw(self) -> bool:
        """Whether any sample is stored as raw pixels."""
        return bool((self.encoding == RAW).any())


def is_iofeed_dataset(path: Path) -> bool:
    """Whether `path` holds an iofeed dataset (a manifest)."""
    return (Path(path) / MANIFEST_NAME).is_file()


def open_source(source: Path | str, split: str = "train") -> SampleSource:
    """Open an iofeed dataset's split, or scan an image folder (then `split` is ignored)."""
    path = Path(source)
    if not path.exists():
        raise SourceError(f"source not found: {path} (pass an image folder or an iofeed dataset)")
    if is_iofeed_dataset(path):
        return _open_dataset(path, split)
    return _open_folder(path)


def _open_dataset(path: Path, split: str) -> SampleSource:
    manifest = Manifest.read(path)
    if split not in manifest.splits:
        raise OptionError(f"split {split!r} not in {path} (it has: {', '.join(manifest.splits)})")
    info = manifest.splits[split]
    table = load_table(path / info.table)
    shard = table["shard"]
    if len(table) != info.samples or (len(table) and (shard.min() < 0 or shard.max() >= len(info.shards))):
        raise DatasetError(f"{path / info.table} does not match the manifest's {info.samples} samples in "
                           f"{len(info.shards)} shards (run `iofeed preprocess` again)")
    files = np.array([str(path / s["name"]).encode() for s in info.shards], dtype=np.bytes_)
    missing = [s["name"] for s in info.shards if not (path / s["name"]).is_file()]
    if missing:
        raise SourceError(f"{path} is incomplete: shard {missing[0]} is missing (run `iofeed preprocess` again)")
    return SampleSource(
        files=files,
        file_id=table["shard"].astype(np.int32),
        offset=table["offset"].copy(),
        size=table["size"].copy(),
        label=table["label"].copy(),
        classes=list(manifest.classes),
        kind="dataset",
        encoding=table["encoding"].copy(),
        width=table["width"].copy(),
        height=table["height"].copy(),
        dataset=path,
        dataset_id=manifest.dataset_id,
    )


def check_unchanged(source: SampleSource) -> None:
    """DatasetError unless the manifest of `source`'s dataset still has the id it had when the
    source was opened: called after opening a shard, so that shard belongs to that dataset."""
    if source.dataset is None:
        return
    try:
        now = Manifest.read(source.dataset).dataset_id
    except (DatasetError, OSError):
        now = "(unreadable)"
    if now != source.dataset_id:
        raise DatasetError(f"{source.dataset} was replaced after it was opened (dataset id "
                           f"{source.dataset_id or '(none)'} is now {now or '(none)'}): its shards no longer "
                           "match the sample table this loader holds; open it again")


def _open_folder(path: Path) -> SampleSource:
    scan = scan_folder(path)
    count = len(scan.files)
    files = np.array([str(scan.root / f).encode("utf-8", "surrogateescape") for f in scan.files], dtype=np.bytes_)
    return SampleSource(
        files=files,
        file_id=np.arange(count, dtype=np.int32),
        offset=np.zeros(count, dtype=np.int64),
        size=np.full(count, -1, dtype=np.int64),
        label=np.asarray(scan.labels, dtype=np.int64),
        classes=scan.class_names,
        kind="folder",
        encoding=np.zeros(count, dtype=np.uint8),
        width=np.zeros(count, dtype=np.int32),
        height=np.zeros(count, dtype=np.int32),
        rejected=Counter(reason_kind(r.reason) for r in scan.rejected),
    )


# Map whole shards up front (MAP_POPULATE, Linux): ~7 ms per 128 MiB shard from the page cache,
# where faulting pages in one by one as samples are touched cost ~1 ms per raw sample.
MAP_FLAGS = mmap.MAP_SHARED | getattr(mmap, "MAP_POPULATE", 0)


class SampleReader:
    """Reads samples: encoded bytes, or raw pixels as views of memory-mapped shards. Keeps
    shard files open and mapped (one reader per process)."""

    def __init__(self, source: SampleSource) -> None:
        self._source = source
        self._handles: dict[int, int] = {}
        self._maps: dict[int, mmap.mmap] = {}

    def pixels(self, index: int) -> np.ndarray:
        """Raw sample `index` as a read-only (height, width, 3) uint8 view of its shard's map."""
        src = self._source
        file_id, offset = int(src.file_id[index]), int(src.offset[index])
        shape = (int(src.height[index]), int(src.width[index]), 3)
        mapped = self._maps.get(file_id)
        try:
            if mapped is None:
                with open(src.files[file_id], "rb") as f:
                    check_unchanged(src)
                    mapped = self._maps[file_id] = mmap.mmap(f.fileno(), 0, flags=MAP_FLAGS, prot=mmap.PROT_READ)
        except OSError as exc:
            raise SampleError(f"unreadable ({exc.strerror})") from None
        if offset + int(src.size[index]) > len(mapped) or shape[0] * shape[1] * 3 != int(src.size[index]):
            raise SampleError("shard is truncated or the index does not match it (run `iofeed preprocess` again)")
        return np.frombuffer(mapped, np.uint8, count=int(src.size[index]), offset=offset).reshape(shape)

    def read(self, index: int) -> bytes:
        """The encoded bytes of sample `index`; SampleError says why it cannot be read."""
        src = self._source
        file_id, size = int(src.file_id[index]), int(src.size[index])
        try:
            if size < 0:
                with open(src.files[file_id], "rb") as f:
                    return f.read()
            fd = self._handles.get(file_id)
            if fd is None:
                fd = os.open(src.files[file_id], os.O_RDONLY)
                try:
                    check_unchanged(src)
                except DatasetError:
                    os.close(fd)
                    raise
                self._handles[file_id] = fd
            data = os.pread(fd, size, int(src.offset[index]))
        except OSError as exc:
            raise SampleError(f"unreadable ({exc.strerror})") from None
        if len(data) != size:
            raise SampleError("shard is truncated (run `iofeed preprocess` again)")
        return data

    def close(self) -> None:
        """Close the shard files and maps (a map still viewed by an array stays until it is freed)."""
        for fd in self._handles.values():
            os.close(fd)
        self._handles.clear()
        for mapped in self._maps.values():
            try:
                mapped.close()
            except BufferError:
                pass
        self._maps.clear()
