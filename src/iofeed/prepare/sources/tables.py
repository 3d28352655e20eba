"""The `parquet` and `hf` sources: Parquet files, or a Hugging Face dataset saved with
`save_to_disk` (Arrow stream files), with an image column (bytes, or `{"bytes", "path"}`) and a
label column; the other columns (those holding no images) are each sample's extra. Read a row
group (an Arrow record batch) at a time, never the whole table; each image's bytes are copied
into a spool file the workers read by offset, within the spool's room (`spool.copy_within`)."""
from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

from ...errors import SourceError, require
from ...sources.folder_scan import Rejection
from .base import SourceOptions, SourceScan
from .label_cells import missing
from .label_targets import Targets
from .spool import copy_within, spool_room

DEFAULT_LABEL = "label"
PARQUET_MAGIC = b"PAR1"
HF_STATE = "state.json"  # what `datasets.save_to_disk` writes beside its .arrow files
HF_DICT = "dataset_dict.json"
ROWS_PER_BATCH = 1024  # rows converted to Python at a time (within one row group)


def is_parquet(path: str | Path) -> bool:
    """Whether the file at `path` is Parquet (by its magic bytes)."""
    try:
        with open(path, "rb") as f:
            return f.read(4) == PARQUET_MAGIC
    except OSError:
        return False


def is_hf_dataset(path: str | Path) -> bool:
    """Whether `path` is a folder written by `datasets.save_to_disk` (one split or a DatasetDict)."""
    return (Path(path) / HF_STATE).is_file() or (Path(path) / HF_DICT).is_file()


def scan_parquet(src: str, options: SourceOptions, room: int | None = None) -> SourceScan:
    """The rows of a Parquet file, or of every Parquet file in a folder (by content, sorted); each
    file's image cells copied into the spool within `room` bytes (None: `spool_room`)."""
    pq = require("pyarrow.parquet", "parquet")
    path = Path(src)
    files = [p for p in sorted(path.rglob("*")) if p.is_file() and is_parquet(p)] if path.is_dir() else [path]
    if not files:
        raise SourceError(f"no Parquet files in {src}")
    first = _parquet_file(pq, files[0])
    features = _hf_features((first.schema_arrow.metadata or {}).get(b"huggingface"), files[0])
    result = _scan_setup(src, "parquet", first.schema_arrow, features, options, files[0])

    def batches(file: Path) -> Iterator[Any]:
        table = _parquet_file(pq, file)
        missing = [c for c in result.columns if c not in table.schema_arrow.names]
        if missing:
            raise SourceError(f"{file} has no column {missing[0]!r}, which {files[0].name} has: pass Parquet files "
                              "of one table")
        try:
            for group in range(table.num_row_groups):
                yield from table.iter_batches(ROWS_PER_BATCH, row_groups=[group], columns=result.columns)
        except (OSError, ValueError) as exc:  # ArrowInvalid, or a page header that does not deserialize
            reason = " ".join(str(exc).split())  # pyarrow's thrift errors span lines
            raise SourceError(f"cannot read Parquet file {file}: {reason} (write it again, or leave it out of "
                              "SRC)") from None

    for number, file in enumerate(files):
        _spool_rows(result, str(file), number, batches(file), options, room)
    return result.scan


def _parquet_file(pq: Any, path: Path) -> Any:
    """`pq.ParquetFile(path)`; SourceError naming the file when it cannot be opened."""
    try:
        return pq.ParquetFile(path)
    except (OSError, ValueError) as exc:  # pyarrow's ArrowInvalid is a ValueError
        reason = " ".join(str(exc).split())  # pyarrow's thrift errors span lines (a footer cut or overwritten)
        raise SourceError(f"cannot read Parquet file {path}: {reason} (write it again, or leave it out of "
                          "SRC)") from None


def scan_hf(src: str, options: SourceOptions, room: int | None = None) -> SourceScan:
    """The rows of a dataset saved by `datasets.save_to_disk` (its Arrow files, memory-mapped); each
    file's image cells copied into the spool within `room` bytes (None: `spool_room`)."""
    pa = require("pyarrow", "hf")
    root = Path(src)
    if (root / HF_DICT).is_file():
        splits = _saved_json(root / HF_DICT).get("splits", [])
        raise SourceError(f"{src} is a DatasetDict: pass one of its splits, e.g. {root / (splits or ['train'])[0]}")
    state = _saved_json(root / HF_STATE)
    try:
        files = [root / entry["filename"] for entry in state.get("_data_files", [])]
    except (KeyError, TypeError):
        raise SourceError(f"{root / HF_STATE}: a data file without its filename (save the dataset again with "
                          "`save_to_disk`)") from None
    info_path = root / "dataset_info.json"
    features = _saved_json(info_path).get("features", {}) if info_path.is_file() else {}
    where = info_path
    if not files:
        raise SourceError(f"{src}: {HF_STATE} lists no data files")
    missing = [f for f in files if not f.is_file()]
    if missing:
        raise SourceError(f"{src}: {HF_STATE} lists {missing[0].name}, which is missing (save the dataset again "
                          "with `save_to_disk`)")
    try:
        with pa.memory_map(str(files[0])) as source:
            schema = pa.ipc.open_stream(source).schema
    except (OSError, ValueError) as exc:  # pyarrow's ArrowInvalid is a ValueError
        raise _unreadable_arrow(files[0], exc) from None
    result = _scan_setup(src, "hf", schema, features, options, where)

    def batches(file: Path) -> Iterator[Any]:
        try:
            with pa.memory_map(str(file)) as source:
                for batch in pa.ipc.open_stream(source):
                    yield batch.select(result.columns)
        except (OSError, ValueError, KeyError) as exc:  # damaged, truncated, or another table's file
            raise _unreadable_arrow(file, exc) from None

    for number, file in enumerate(files):
        _spool_rows(result, str(file), number, batches(file), options, room)
    return result.scan


def _unreadable_arrow(path: Path, exc: Exception) -> SourceError:
    return SourceError(f"cannot read {path}: {exc} (save the dataset again with `save_to_disk`)")


def _saved_json(path: Path) -> dict[str, Any]:
    """A JSON object `datasets.save_to_disk` wrote; SourceError naming the file when it is not one."""
    try:
        found = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise SourceError(f"cannot read {path}: {exc} (save the dataset again with `save_to_disk`)") from None
    if not isinstance(found, dict):
        raise SourceError(f"{path} holds a {type(found).__name__}, not the object `save_to_disk` writes (save the "
                          "dataset again)")
    return found


class _Setup:
    """The scan being built and the columns it reads: the image, the label, and the extras (every
    other column that holds no images, carried as each sample's extra)."""

    def __init__(self, scan: SourceScan, image: str, label: str, extras: list[str]) -> None:
        self.scan, self.image, self.label, self.extras = scan, image, label, extras

    @property
    def columns(self) -> list[str]:
        return [self.image, self.label, *self.extras]


def _scan_setup(src: str, kind: str, schema: Any, features: Any, options: SourceOptions, where: Path) -> _Setup:
    """The image and label columns of `schema` (given, or found), and the class names if known."""
    names = list(schema.names)
    found = [n for n in names if _holds_images(schema.field(n).type)]
    if options.image_column is None and len(found) > 1:  # a mask or a thumbnail beside the photo
        raise SourceError(f"{src}: several image columns ({', '.join(found)}): choose one with --image-column, "
                          f"e.g. --image-column {found[0]}")
    image = options.image_column or (found[0] if found else None)
    if image is None or image not in names:
        raise SourceError(f"{src}: no image column {image or '(binary or {bytes, path})'} among "
                          f"{', '.join(names)} (name it with --image-column)")
    if not _holds_images(schema.field(image).type):
        raise SourceError(f"{src}: column {image!r} holds {schema.field(image).type}, not images (binary or "
                          "{bytes, path}): name the image column with --image-column")
    label = options.label_column or DEFAULT_LABEL
    if label not in names:
        raise SourceError(f"{src}: no label column {label!r} among {', '.join(names)} (name it with --label-column)")
    if _holds_images(schema.field(label).type):
        raise SourceError(f"{src}: column {label!r} holds bytes (images), not labels: name the label column "
                          "with --label-column")
    class_names = _class_names(features, label, where)
    extras = [n for n in names if n not in (image, label) and not _holds_images(schema.field(n).type)]
    return _Setup(SourceScan(root=str(src), kind=kind, targets=Targets(names=class_names)), image, label, extras)


def _holds_images(kind: Any) -> bool:
    """Whether an Arrow type can hold encoded images: binary, or a struct with a `bytes` field."""
    pa = require("pyarrow", "parquet")
    if pa.types.is_binary(kind) or pa.types.is_large_binary(kind):
        return True
    return bool(pa.types.is_struct(kind) and kind.get_field_index("bytes") >= 0)


def _hf_features(metadata: bytes | None, where: Path) -> Any:
    """The `features` Hugging Face records in a Parquet file's schema metadata (empty if none);
    SourceError naming the file when the metadata is not what `datasets` writes."""
    if not metadata:
        return {}
    try:
        info = json.loads(metadata).get("info", {})
        return info.get("features", {})
    except (ValueError, AttributeError):
        raise _bad_features(where, "its 'huggingface' schema metadata is not a JSON object with an 'info' "
                                   "object") from None


def _class_names(features: Any, label: str, where: Path) -> list[str] | None:
    """The class names `features` give the label column (a ClassLabel, or a Sequence or list of
    one), None when it gives none; SourceError naming `where` when the features are malformed."""
    if not isinstance(features, dict):
        raise _bad_features(where, f"its features are a {type(features).__name__}, not an object")
    feature = features.get(label)
    if isinstance(feature, dict) and feature.get("_type") in ("Sequence", "List"):  # List: datasets >= 4
        feature = feature.get("feature")
    elif isinstance(feature, list) and feature:
        feature = feature[0]
    if feature is None or feature == []:
        return None
    if not isinstance(feature, dict):
        raise _bad_features(where, f"the feature of column {label!r} is {json.dumps(feature)[:40]}, not an object")
    if feature.get("_type") != "ClassLabel":
        return None
    names = feature.get("names")
    if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
        raise _bad_features(where, f"the ClassLabel of column {label!r} has names {json.dumps(names)[:40]}, not a "
                                   "list of strings")
    return names


def _bad_features(where: Path, what: str) -> SourceError:
    return SourceError(f"{where}: {what} (write the dataset again with `datasets`, or remove its features)")


def _spool_rows(setup: _Setup, file: str, number: int, batches: Iterator[Any], options: SourceOptions,
                room: int | None) -> None:
    """Accept or reject each row of `batches`; accepted images are appended to a spool file, at
    most `room` bytes of it (None: the spool disk's room now, `spool_room`). SourceError naming
    `file` and the bound past it, or when the disk fails a write; the partial spool file removed."""
    assert options.spool is not None, "tables are spooled only where a spool folder is set"
    options.spool.mkdir(parents=True, exist_ok=True)
    spool = options.spool / f"{number:06d}.bin"
    room = spool_room(options.spool) if room is None else room
    fix = "free disk there, or write the output (-o) to a disk with room for the table's images"
    copy_within(_accepted(setup, file, spool, batches), spool, room, file, "copied out (its image cells)", fix)


def _accepted(setup: _Setup, file: str, spool: Path, batches: Iterator[Any]) -> Iterator[memoryview]:
    """The image bytes of the accepted rows of `batches`, in order, each added to the scan at its
    offset in `spool`; rows without a label or an image are rejected with the reason."""
    base = Path(file).parent
    row = offset = 0
    for batch in batches:
        labels = batch.column(setup.label).to_pylist()
        extras = _extras(batch, setup.extras)
        for (data, path), label, extra in zip(_cells(batch.column(setup.image)), labels, extras):
            name = f"{file}#{row}"
            row += 1
            if missing(label):
                blank = "null" if label is None else repr(label)  # NaN: pandas' missing value
                setup.scan.rejected.append(Rejection(name, f"no label (column {setup.label!r} is {blank})"))
            elif data:
                setup.scan.add(str(spool), name, label, extra, (offset, len(data)))
                offset += len(data)
                yield data
            elif path and (base / path).is_file():
                setup.scan.add(os.fspath(base / path), name, label, extra)
            else:
                where = f", its path {path} not found" if path else ""
                setup.scan.rejected.append(Rejection(name, f"no image (column {setup.image!r} is empty{where})"))


def _extras(batch: Any, columns: list[str]) -> list[dict[str, Any] | None]:
    """Each row's extra: {column: value} of the extra columns (None when there are none)."""
    if not columns:
        return [None] * batch.num_rows
    values = {name: batch.column(name).to_pylist() for name in columns}
    return [{name: _plain(values[name][row]) for name in columns} for row in range(batch.num_rows)]


def _plain(value: Any) -> Any:
    """A cell as JSON can hold it (dates and decimals as text)."""
    if value is None or isinstance(value, (bool, int, float, str, list, dict)):
        return value
    return str(value)


def _cells(column: Any) -> Iterator[tuple[memoryview | None, str | None]]:
    """(image bytes, path) of each row of an image column, the bytes as views of the Arrow buffer:
    no Python copy of each image (those freed copies grew the heap by the size of the source)."""
    pa = require("pyarrow", "parquet")
    paths: list[Any] = [None] * len(column)
    valid = np.asarray(column.is_valid())
    if pa.types.is_struct(column.type):
        if column.type.get_field_index("path") >= 0:
            paths = column.field("path").to_pylist()
        column = column.field("bytes")
        valid &= np.asarray(column.is_valid())
    wide = pa.types.is_large_binary(column.type)
    _, offsets, data = column.buffers()
    where = np.frombuffer(offsets, np.int64 if wide else np.int32)[column.offset:column.offset + len(column) + 1]
    view = memoryview(data) if data is not None else memoryview(b"")
    for row in range(len(column)):
        start, end = int(where[row]), int(where[row + 1])
        yield (view[start:end] if valid[row] and end > start else None), paths[row]
