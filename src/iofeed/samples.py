"""Opening a source — an image folder or an iofeed dataset — as one flat table of samples."""
from __future__ import annotations

import errno
import mmap
import os
import resource
import time
from collections import Counter, OrderedDict
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from .errors import DatasetError, FetchError, IofeedError, SampleError, SourceError, WorkerError
from .format.files import descriptor_error, open_regular, regular_stat
from .format.identity import check_identity
from .format.manifest import IMAGES_AS_IS, MANIFEST_NAME, Manifest, SplitInfo
from .format.table import RAW, load_table, table_problem
from .prepare.scan import display_path, reason_kind, scan_folder
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
    rejected: Counter = field(default_factory=Counter)  # reason kind -> count, found before loading
    dataset: Path | None = None  # the local dataset directory (None for folders and streamed datasets)
    dataset_id: str = ""  # the manifest's id when opened ("" for folders and datasets before version 3)
    remote: RemoteShards | None = None  # streamed dataset: `files` are URLs read through the node cache
    validated: bool = True  # images checked by preprocess (False: shards indexed in place, images as they came)
    targets: dict = field(default_factory=dict)  # the manifest's `targets` entry when opened ({} for folders)

    def __len__(self) -> int:
        return len(self.label)

    def path_of(self, index: int) -> str:
        """A printable path naming sample `index` (with its offset inside a shard)."""
        path = display_path(self.files[self.file_id[index]].decode("utf-8", "surrogateescape"))
        return path if self.size[index] < 0 else f"{path}@{int(self.offset[index])}"

    def check_unchanged(self, file_id: int) -> None:
        """DatasetError when the dataset holding file `file_id` was replaced since it was opened."""
        check_unchanged(self)

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
    path = Path(source)
    if not path.exists():
        raise SourceError(f"source not found: {path} (pass an image folder or an iofeed dataset)")
    if is_iofeed_dataset(path):
        return _open_dataset(path, split, cache_dir, cache_limit)
    return _open_folder(path)


def _open_dataset(path: Path, split: str, cache_dir: Path | str | None = None,
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


def shard_location(dataset: Path, shard: dict) -> str:
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


def _open_checked(source: SampleSource, file_id: int) -> int:
    """A descriptor of local shard `file_id`, opened before its dataset is checked unchanged."""
    fd = open_regular(source.files[file_id])
    try:
        source.check_unchanged(file_id)
    except DatasetError:
        os.close(fd)
        raise
    return fd

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


def _local_open_limit() -> int:
    """Local shards one reader keeps open: a quarter of the open-file limit (a mapped shard holds two
    descriptors, and the process has its own), at most 4096; the least recently used are closed beyond it."""
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    return max(4, min(4096, (soft if soft != resource.RLIM_INFINITY else 16384) // 4))


def _read_error(exc: OSError, path: bytes) -> IofeedError:
    """A read that failed: SampleError (skipped or raised by `on_error`) for the sample's own fault,
    an error of its own for the machine's (out of descriptors or memory), which no skip would mend."""
    if exc.errno == errno.ENOMEM:
        return WorkerError(f"{os.fsdecode(path)}: out of memory mapping or reading it: raise the memory limit "
                           "(`ulimit -v`, the container's), or lower workers or batch_size")
    error = descriptor_error(exc, path)
    return error if isinstance(error, IofeedError) else SampleError(f"unreadable ({exc.strerror})")


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
    shard files open and mapped (one reader per process); for a streamed dataset, the cached
    copies it holds are leased (never evicted): at most `remote.open_limit` at a time, and only
    those the current or the previous batch read."""

    def __init__(self, source: SampleSource) -> None:
        self._source = source
        self._handles: OrderedDict[int, int] = OrderedDict()  # least recently opened first
        self._maps: dict[int, mmap.mmap] = {}
        self._failed: dict[int, tuple[str, float]] = {}  # streamed shards that failed: (reason, when)
        self._touched: set[int] = set()  # shards read in the current batch
        self._epoch: int | None = None  # the epoch of the current batch: failures are remembered within it

    def _fd(self, file_id: int) -> int:
        """An open descriptor of shard `file_id` (a leased cached copy for a streamed dataset)."""
        self._touched.add(file_id)
        fd = self._handles.get(file_id)
        if fd is not None:
            self._handles.move_to_end(file_id)
            return fd
        remote = self._source.remote
        if remote is None:
            while len(self._handles) >= _local_open_limit():  # when the hard limit is low (see raise_open_limit)
                self._release(next(iter(self._handles)))
            fd = _open_checked(self._source, file_id)
        elif file_id in self._failed and time.monotonic() - self._failed[file_id][1] < remote.cache.retry.budget:
            raise FetchError(self._failed[file_id][0])  # its other samples skip at once, for the retry budget
        else:
            self._release_stale()  # before asking room for another shard, or waiting for its download
            while len(self._handles) >= remote.open_limit:
                self._release(next(iter(self._handles)))
            try:
                fd = remote.acquire(file_id)
            except FetchError as exc:
                self._failed[file_id] = (str(exc), time.monotonic())  # tried again after the budget
                raise
        self._handles[file_id] = fd
        return fd

    def _release(self, file_id: int) -> None:
        """Close shard `file_id` (a map still viewed by an array stays, and leased, until it is freed)."""
        os.close(self._handles.pop(file_id))
        mapped = self._maps.pop(file_id, None)
        if mapped is not None:
            try:
                mapped.close()
            except BufferError:
                pass

    def pixels(self, index: int) -> np.ndarray:
        """Raw sample `index` as a read-only (height, width, 3) uint8 view of its shard's map."""
        src = self._source
        file_id, offset = int(src.file_id[index]), int(src.offset[index])
        shape = (int(src.height[index]), int(src.width[index]), 3)
        mapped = self._maps.get(file_id)
        try:
            if mapped is None:
                fd = self._fd(file_id)
                mapped = self._maps[file_id] = mmap.mmap(fd, 0, flags=MAP_FLAGS, prot=mmap.PROT_READ)
        except OSError as exc:
            raise _read_error(exc, src.files[file_id]) from None
        except ValueError:  # mmap refuses an empty file
            raise SampleError("shard is empty (run `iofeed preprocess` again)") from None
        if offset + int(src.size[index]) > len(mapped) or shape[0] * shape[1] * 3 != int(src.size[index]):
            raise SampleError("shard is truncated or the index does not match it (run `iofeed preprocess` again)")
        return np.frombuffer(mapped, np.uint8, count=int(src.size[index]), offset=offset).reshape(shape)

    def read(self, index: int) -> bytes:
        """The encoded bytes of sample `index`; SampleError says why it cannot be read."""
        src = self._source
        file_id, size = int(src.file_id[index]), int(src.size[index])
        try:
            if size < 0:  # a folder's file, checked regular again: a FIFO put there since the scan would block
                with os.fdopen(open_regular(src.files[file_id]), "rb") as f:
                    return f.read()
            data = os.pread(self._fd(file_id), size, int(src.offset[index]))
        except OSError as exc:
            raise _read_error(exc, src.files[file_id]) from None
        except DatasetError:
            if size >= 0:  # a shard that is not a regular file: the dataset's fault, not one sample's
                raise
            raise SampleError("not a regular file") from None  # the scan's reason for the same
        if len(data) != size:
            raise SampleError("shard is truncated (run `iofeed preprocess` again)")
        return data

    def begin_batch(self, epoch: int) -> None:
        """A batch of `epoch` starts: the fetch failures remembered in another epoch are forgotten, so
        a later epoch tries those shards again and never skips samples for an earlier failure."""
        if epoch != self._epoch:
            self._epoch, self._failed = epoch, {}

    def _release_stale(self) -> None:
        """End the leases on shards the current batch has not read."""
        for file_id in [f for f in self._handles if f not in self._touched]:
            self._release(file_id)

    def end_batch(self) -> None:
        """A batch is done: keep the streamed shards it read (the next batch of a block order
        mostly reads them again), end the leases on the others, so that a reader never holds
        back the eviction of shards it has stopped reading (local shards stay open)."""
        if self._source.remote is not None:
            self._release_stale()
        self._touched = set()

    def close(self) -> None:
        """Close the shard files and maps (a map still viewed by an array stays until it is freed)."""
        for file_id in list(self._handles):
            self._release(file_id)
