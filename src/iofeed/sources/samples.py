"""Opening a source — an image folder or an iofeed dataset — as one flat table of samples."""
from __future__ import annotations

import os
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from ..errors import DatasetError, SourceError
from ..format.files import regular_stat
from ..format.identity import check_identity
from ..format.manifest import IMAGES_AS_IS, MANIFEST_NAME, Manifest, SplitInfo
from ..format.table import RAW, load_table, table_problem
from .folder_scan import display_path, reason_kind, scan_folder
from .remote.urls import is_url

if TYPE_CHECKING:
    from .remote.dataset import RemoteShards


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
    rejected: Counter[str] = field(default_factory=Counter[str])  # reason kind -> count, found before loading
    dataset: Path | None = None  # the local dataset directory (None for folders and streamed datasets)
    dataset_id: str = ""  # the manifest's id when opened ("" for folders and datasets before version 3)
    remote: RemoteShards | None = None  # streamed dataset: `files` are URLs read through the node cache
    validated: bool = True  # images checked by preprocess (False: shards indexed in place, images as they came)
    targets: dict[str, Any] = field(default_factory=dict)  # the manifest's `targets` entry when opened ({} for folders)
    masks: np.ndarray | None = None  # int64 (n, 2): each sample's instance-mask member (offset, size) in its shard
    captions: tuple[np.ndarray, np.ndarray] | None = None  # (offsets, UTF-8 bytes): for a tokenizer in the workers
    boxes: Any = None  # the split's `box_targets.BoxTable` (it imports this module), when `transform=` takes them

    def __len__(self) -> int:
        return len(self.label)

    def path_of(self, index: int) -> str:
        """A printable path naming sample `index` (with its offset inside a shard)."""
        path = display_path(self.files[self.file_id[index]].decode("utf-8", "surrogateescape"))
        return path if self.size[index] < 0 else f"{path}@{int(self.offset[index])}"

    def check_unchanged(self, file_id: int) -> None:
        """DatasetError when the dataset holding file `file_id` was replaced since it was opened."""
        check_unchanged(self)

    def part_of(self, index: int) -> int:
        """Which of a mixture's sources holds sample `index` (`mixsource.MixedSource`); 0 here."""
        return 0

    def has_raw(self) -> bool:
        """Whether any sample is stored as raw pixels."""
        return bool((self.encoding == RAW).any())


def is_iofeed_dataset(path: Path) -> bool:
    """Whether `path` holds an iofeed dataset (a manifest)."""
    return os.path.lexists(Path(path) / MANIFEST_NAME)  # anything there: Manifest.read says what is wrong


def read_from(source: Path | str) -> str:
    """`source` as a loader's stats name it: a URL as given, a path made absolute (the folder the
    process ran in may not be the reader's)."""
    return str(source) if is_url(str(source)) else str(Path(source).resolve())


def open_source(source: Path | str, split: str = "train", *, cache_dir: str | os.PathLike[str] | None = None,
                cache_limit: int | None = None) -> SampleSource:
    """Open an iofeed dataset's split — a path, or an s3://, gs:// or http(s):// URL whose shards are
    fetched into the node cache at `cache_dir`, bounded by `cache_limit` bytes — or scan an image
    folder (then `split` is ignored)."""
    if is_url(source):
        from .remote.dataset import open_remote

        opened = open_remote(str(source), split, cache_dir, cache_limit)
        streamed = dataset_source(opened.manifest, opened.info, opened.table, opened.files, opened.where)
        streamed.remote = opened.shards
        return streamed
    path = Path(source).absolute()  # workers open its files later, from the cwd their fork server started in
    if not path.exists():
        raise SourceError(f"source not found: {path} (pass an image folder or an iofeed dataset)")
    if is_iofeed_dataset(path):
        return _open_dataset(path, split, cache_dir, cache_limit)
    if not path.is_dir():
        raise SourceError(_not_a_folder(path))
    return _open_folder(path)


def _not_a_folder(path: Path) -> str:
    """What a file passed as a source is, and what to pass instead: a dataset's own file (a shard,
    an index, the manifest) names the dataset; a WebDataset shard names `iofeed index`."""
    if is_iofeed_dataset(path.parent):
        split = path.name.split("-", 1)[0] if path.name.endswith(".tar") and "-" in path.name else None
        call = f"iofeed.loader({str(path.parent)!r}" + (f", split={split!r}" if split else "") + ", ...)"
        return (f"{path} is a file of the iofeed dataset {path.parent} (a shard, index or manifest): pass the "
                f"dataset's folder: {call}")
    if path.name.endswith(".tar"):
        return (f"{path} is a tar shard, not a dataset: index it once with `iofeed index {path} -o DATASET.iof` (or "
                "`iofeed preprocess`), then pass that folder")
    return f"{path} is a file: pass an image folder with one subfolder per class, or an iofeed dataset folder"


def _open_dataset(path: Path, split: str, cache_dir: str | os.PathLike[str] | None = None,
                  cache_limit: int | None = None) -> SampleSource:
    """A local dataset's split; shards it indexes elsewhere (`iofeed index`: a `url` per shard) are
    read there, URLs through the node cache."""
    manifest = Manifest.read(path)
    info = manifest.split(split, str(path))
    table = load_table(path / info.table)
    locations = [shard_location(path, s) for s in info.shards]
    files = np.array([str(where).encode() for where in locations], dtype=np.bytes_)
    missing = [str(where) for where in locations if not is_url(where) and not os.path.lexists(where)]
    if missing:
        raise SourceError(f"{path} is incomplete: shard {missing[0]} is missing (run `iofeed preprocess` "
                          "or `iofeed index` again)")
    for shard, where in zip(info.shards, locations):  # a FIFO there would block a reader; truncated or replaced
        if not is_url(where):  # the node cache checks a streamed shard's size and sha256
            check_identity(where, shard)
    for shard in info.shards:  # DALI reads the indexes itself
        if os.path.exists(path / shard["index"]):
            regular_stat(path / shard["index"])
    source = dataset_source(manifest, info, table, files, str(path / info.table), dataset=path)
    source.validated = manifest.image.get("encoding") != IMAGES_AS_IS
    if any(is_url(where) for where in locations):
        from .remote.cache import ShardRef
        from .remote.dataset import remote_shards
        from .remote.urls import scheme

        if not all(is_url(where) for where in locations):
            raise DatasetError(f"{path} indexes local shards and URLs together: index them separately")
        refs = [ShardRef(where, int(s["bytes"]), s.get("sha256", "")) for where, s in zip(locations, info.shards)]
        source.remote = remote_shards(str(path.resolve()), refs, scheme(locations[0]).settings(), cache_dir,
                                      cache_limit)
    return source


def shard_location(dataset: Path, shard: dict[str, Any]) -> str:
    """Where a shard's tar is read: its own `url` (a dataset made by `iofeed index`), else its file
    in the dataset folder."""
    return shard.get("url") or str(Path(dataset) / shard["name"])


def dataset_source(manifest: Manifest, info: SplitInfo, table: np.ndarray, files: np.ndarray, where: str,
                   dataset: Path | None = None) -> SampleSource:
    """The samples of one split's table (read from `where`), in `files` (one per shard); DatasetError
    when the table does not match the split's sample and shard counts."""
    if len(table) != info.samples:
        raise DatasetError(f"{where} does not match the manifest's {info.samples} samples in "
                           f"{len(info.shards)} shards (run `iofeed preprocess` again)")
    problem = table_problem(table, len(manifest.classes), [s["bytes"] for s in info.shards],
                            unlabelled=manifest.targets.get("kind", "class") != "class")
    if problem:
        raise DatasetError(f"{where} does not match its manifest: {problem} (run `iofeed preprocess` again)")
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
        dataset=dataset,
        dataset_id=manifest.dataset_id,
        targets=dict(manifest.targets),
    )


def check_unchanged(source: SampleSource) -> None:
    """DatasetError unless the manifest of `source`'s dataset still has the id it had when the
    source was opened: called after opening a shard, so that shard belongs to that dataset. A
    streamed dataset has no local manifest: each shard is checked instead against the size and
    sha256 its opened manifest records, when it is fetched into the cache."""
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


def shrunk_shards(source: SampleSource) -> list[str]:
    """The local shards now shorter than their samples reach, as "name is now N bytes, its samples
    need M": a shard truncated under a live loader kills a worker reading its map with SIGBUS."""
    if source.kind != "dataset" or source.remote is not None or not len(source):
        return []
    needed = np.zeros(len(source.files), np.int64)
    np.maximum.at(needed, source.file_id, source.offset + source.size)
    shrunk = []
    for file_id, name in enumerate(source.files):
        try:
            size = os.stat(name).st_size
        except OSError:
            size = 0
        if size < needed[file_id]:
            shrunk.append(f"{os.fsdecode(name)} is now {size:,} bytes, its samples need {int(needed[file_id]):,}")
    return shrunk


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
