"""Images the `dali` engine checks before its first epoch: DALI stops its pipeline at a file it
cannot decode, so folders and shards indexed in place are decoded once, as strictly as the
workers engine decodes them, and the bad ones are skipped by index."""
from __future__ import annotations

import os

from ...errors import DatasetError
from ...format.files import open_regular
from ...image.fastjpeg import decode_problem
from ...runtime.processes import worker_pool
from ...sources.samples import SampleSource

INLINE_CHECK_FILES = 64  # folders up to this size are validated in-process (no pool start-up)


def check_file(path: bytes, offset: int = 0, size: int = -1) -> str | None:
    """Why the image file at `path` (or its `size` bytes at `offset`) cannot be decoded, or None.
    Runs in a pool worker.

    Decodes the whole entropy-coded stream (JPEGs at 1/8 DCT scale), so truncated or corrupt
    files are found here, not by DALI mid-epoch, where they would stop the pipeline. JPEGs are
    also checked as strictly as the workers engine decodes them: DALI would decode corrupt
    data that engine refuses, and the two engines would deliver different samples.
    """
    try:
        with os.fdopen(open_regular(path), "rb") as f:  # a FIFO put in a folder would block for ever
            data = f.read() if size < 0 else os.pread(f.fileno(), size, offset)
    except OSError as exc:
        return f"unreadable ({exc.strerror})"
    except DatasetError:
        return "not a regular file"
    return decode_problem(data)


def validate_folder(source: SampleSource, workers: int) -> dict[int, str]:
    """{sample index: reason} for every file of a folder source, or image of a dataset whose images
    were not validated (shards indexed in place by `iofeed index`), that does not decode."""
    if (source.kind == "folder" or not source.validated) and len(source) and source.remote is None:
        items = [(source.files[f], int(o), int(n)) for f, o, n in zip(source.file_id, source.offset, source.size)]
    else:
        return {}
    if len(items) <= INLINE_CHECK_FILES or workers == 1:
        reasons = [check_file(*item) for item in items]
    else:
        with worker_pool(workers) as pool:
            reasons = pool.starmap(check_file, items, chunksize=max(1, min(256, len(items) // (8 * workers))))
    return {i: reason for i, reason in enumerate(reasons) if reason is not None}
