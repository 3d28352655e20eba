"""Uploading a dataset to object storage, `iofeed.json` last, so an interrupted upload never looks complete."""
from __future__ import annotations

import dataclasses
import functools
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..errors import DatasetError, OptionError, SourceError
from ..format.manifest import DATASET_NAME, MANIFEST_NAME, Manifest, written_files
from ..runtime.progress import progress as progress_bar
from ..sources.remote.cache_dir import usable_cache_dir
from ..sources.remote.retry import RetryPolicy, describe, is_transient, policy_from_env, with_retries
from ..sources.remote.urls import filesystem, join, scheme

WRITE_CHECK = ".iofeed-write-check"  # a 0-byte object put and removed to check the target first
# An upload is retried whole (one try per call inside s3fs), so it gets a longer budget than a read:
# an object of hundreds of MB that is cut late is sent again; a server silent for 60 s fails an attempt.
UPLOAD_POLICY = RetryPolicy(attempts=8, budget=300.0, stall_seconds=60.0)

if TYPE_CHECKING:
    from .run import PreprocessSummary


def upload_failure(url: str, exc: BaseException, doing: str = "") -> SourceError:
    """One line naming `url` and what to do, for a storage error while uploading there."""
    bucket = url.split("://", 1)[1].split("/", 1)[0]
    if isinstance(exc, FileNotFoundError) and "bucket" in str(exc).lower() and not is_transient(exc):
        what = (f"bucket {bucket!r} does not exist or these credentials cannot see it ({exc}): create it "
                "first or fix the URL")
    elif isinstance(exc, PermissionError):
        what = (f"access denied ({exc}): check that the credentials (AWS_* variables or config, "
                "GOOGLE_APPLICATION_CREDENTIALS) may write there")
    else:
        what = describe(exc)
    return SourceError(f"cannot upload to {url}{doing}: {what}")


def check_target(url: str, overwrite: bool) -> list[str]:
    """Refuse a read-only scheme, a bucket that does not exist or cannot be written (a 0-byte object
    is put and removed), an existing (even partial) dataset unless `overwrite`, or with it, objects
    there that iofeed did not write: all before any work. Returns the names of the old dataset's
    objects (what an overwrite deletes)."""
    if not scheme(url).writable:
        raise OptionError(f"cannot upload to {url}: {url.split('://')[0]}:// is read-only here "
                          "(upload to s3:// or gs://, or serve a local dataset)")
    policy = policy_from_env()
    fs = filesystem(url, policy=policy)
    try:
        exists = with_retries(lambda: fs.exists(url), policy)
        complete = exists and with_retries(lambda: fs.exists(join(url, MANIFEST_NAME)), policy)
        if not exists or overwrite:
            probe = join(url, WRITE_CHECK)
            with_retries(lambda: fs.pipe_file(probe, b""), policy)
            with_retries(lambda: fs.rm_file(probe), policy)
    except Exception as exc:  # noqa: BLE001 - storage errors of any library, named by URL
        raise upload_failure(url, exc) from None
    if exists and not overwrite:
        what = "a dataset" if complete else "objects (an interrupted upload?)"
        raise OptionError(f"output already exists: {url} holds {what} (pass --overwrite to replace it)")
    return _old_objects(fs, url, policy) if exists else []


def _old_objects(fs: Any, url: str, policy: RetryPolicy) -> list[str]:
    """The object names under `url`, all written by iofeed: those its manifest lists, or without
    one (an upload that never finished) those named as iofeed names its files. OptionError naming
    any other: `--overwrite` never deletes what the user put there."""
    try:
        base = fs._strip_protocol(url).rstrip("/")
        names = sorted(path[len(base) + 1:] for path in with_retries(lambda: fs.find(url), policy))
        fs.invalidate_cache(url)  # a listing kept would hide the objects this upload puts
        manifest = join(url, MANIFEST_NAME)
        text = with_retries(lambda: fs.cat_file(manifest), policy) if MANIFEST_NAME in names else None
    except Exception as exc:  # noqa: BLE001 - as above
        raise upload_failure(url, exc) from None
    if text is None:
        ours = {name for name in names if DATASET_NAME.fullmatch(name)}
    else:
        try:
            ours = written_files(Manifest.parse(text.decode("utf-8", "replace"), manifest))
        except DatasetError as exc:
            raise OptionError(f"output {url}: {exc}; --overwrite replaces only the objects a readable manifest "
                              "lists (remove them yourself or pick another -o)") from None
    foreign = [name for name in names if name not in ours]
    if foreign:
        raise OptionError(f"output {url} holds {', '.join(foreign[:3])}{', ...' if len(foreign) > 3 else ''}, "
                          "which iofeed did not write: --overwrite would delete it with the dataset (move it out "
                          "first)")
    return names


def upload_dataset(local: Path, url: str, *, overwrite: bool = False,
                   on_file: Callable[[str, int], None] | None = None) -> None:
    """Upload the dataset folder `local` to `url`: every file, then `iofeed.json`. With `overwrite`
    the old manifest goes first, then the old objects. `on_file(name, bytes)` follows each file."""
    local, url = Path(local), url.rstrip("/")
    if not (local / MANIFEST_NAME).is_file():
        raise SourceError(f"{local} is not an iofeed dataset (no {MANIFEST_NAME})")
    old = check_target(url, overwrite)
    fs = filesystem(url, policy=UPLOAD_POLICY)
    try:
        if MANIFEST_NAME in old:  # the old dataset stops looking complete first
            with_retries(lambda: fs.rm_file(join(url, MANIFEST_NAME)))
        for name in old:  # only the old dataset's own objects (check_target)
            if name != MANIFEST_NAME:
                with_retries(functools.partial(fs.rm_file, join(url, name)))
    except Exception as exc:  # noqa: BLE001 - as in check_target
        raise upload_failure(url, exc, " (removing the old dataset)") from None
    files = sorted(p for p in local.rglob("*") if p.is_file() and p.name != MANIFEST_NAME)
    for path in [*files, local / MANIFEST_NAME]:
        name = path.relative_to(local).as_posix()
        try:
            with_retries(functools.partial(fs.put_file, str(path), join(url, name)), UPLOAD_POLICY)
        except Exception as exc:  # noqa: BLE001 - as in check_target
            raise upload_failure(url, exc, f" ({name})") from None
        if on_file is not None:
            on_file(name, path.stat().st_size)


def preprocess_to_url(src: Path, url: str, *, overwrite: bool = False, progress: bool = True,
                      **options: Any) -> PreprocessSummary:
    """`iofeed preprocess SRC -o URL`: prepare into a temporary folder (under the cache directory),
    then upload it; the summary's `out` is the URL."""
    from .run import preprocess

    check_target(url, overwrite)  # before the work, not after
    staging = usable_cache_dir(None)
    with tempfile.TemporaryDirectory(prefix="upload-", dir=staging) as folder:
        local = Path(folder) / "dataset"
        summary = preprocess(src, local, progress=progress, **options)
        total = sum(p.stat().st_size for p in local.rglob("*") if p.is_file())
        with progress_bar(total=total, unit="B", unit_scale=True, desc="upload", disable=not progress) as bar:
            upload_dataset(local, url, overwrite=overwrite, on_file=lambda name, size: bar.update(size))
    return dataclasses.replace(summary, out=url)
