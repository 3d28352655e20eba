"""How a feed is given the data it reads (`FeedDecl.source`): as it is on disk, as a 3-source
`iofeed.Mix` of it, or streamed from the bench's local S3 endpoint with a cold or a warm cache.
Each form is the source and the `iofeed.loader` keywords it changes; what it makes for the feed
(symlinks, a cache folder) is removed when the feed's `ExitStack` closes."""
from __future__ import annotations

import shutil
import tempfile
from collections.abc import Callable
from contextlib import ExitStack
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

from ...errors import FeedUnavailable
from .feeds import FeedSpec

Given = tuple[Any, dict[str, Any]]  # the source `iofeed.loader` reads, and the keywords the form adds


@dataclass(frozen=True)
class SourceForm:
    """One way of giving a feed its data."""

    make: Callable[[FeedSpec, ExitStack], Given]
    served: bool = False  # read from the bench's local S3 endpoint: `run.py` starts it and sets `spec.endpoint`


def as_on_disk(spec: FeedSpec, made: ExitStack) -> Given:
    """The folder or dataset itself."""
    return spec.source, {}


def mixed(spec: FeedSpec, made: ExitStack) -> Given:
    """The dataset as a 3-source Mix (`mixed_views`), its symlinks in a folder of the feed's own."""
    folder = tempfile.mkdtemp(prefix="iofeed-mix-")
    made.callback(shutil.rmtree, folder, ignore_errors=True)
    return mixed_views(spec.source, folder), {}


def mixed_views(dataset: str, folder: str) -> Any:
    """`dataset` as a 3-source `iofeed.Mix`: three symlinks to it in `folder`, weighted 0.5/0.3/0.2,
    an epoch as long as the dataset's train split. The same files and decoding as iofeed-dataset,
    so the difference between the two feeds is what the mixture costs."""
    import iofeed

    from ...format.manifest import Manifest

    samples = Manifest.read(Path(dataset)).split("train", dataset).samples
    views = []
    for k in range(3):
        view = Path(folder) / f"source{k}.iof"
        view.symlink_to(Path(dataset).resolve(), target_is_directory=True)
        views.append(str(view))
    return iofeed.Mix(dict(zip(views, (0.5, 0.3, 0.2))), epoch_samples=samples)


def streamed(temperature: str, spec: FeedSpec, made: ExitStack) -> Given:
    """The dataset's URL on the local endpoint, with the cache `stream_options` gives `temperature`."""
    from .stream import stream_options, use_endpoint

    if not spec.endpoint:
        raise FeedUnavailable(f"streams from the bench's local S3 endpoint, and none was started for {spec.name} "
                              "(spec.endpoint is empty: run it through `iofeed bench`)")
    use_endpoint(spec.endpoint)
    keywords = stream_options(spec.source, temperature, Path(spec.cache_root))
    made.callback(shutil.rmtree, keywords["cache"].dir, ignore_errors=True)
    return spec.source, keywords


SOURCES = {
    "": SourceForm(as_on_disk),
    "mixed views": SourceForm(mixed),
    "S3 cold": SourceForm(partial(streamed, "cold"), served=True),
    "S3 warm": SourceForm(partial(streamed, "warm"), served=True),
}
