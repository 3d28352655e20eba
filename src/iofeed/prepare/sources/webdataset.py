"""The `webdataset` source: WebDataset tar shards (paths, globs, brace lists, URLs). A sample is
the members sharing a key; its image is the member whose bytes are an image (jpg, jpeg, png,
webp, ... by content; several are refused unless `--image-key` picks one), its label `cls` (an
index or a name), `txt` (a name) or `json` (its `label`, or the key `--label-column` names); a
`json` member also comes along as the extra."""
from __future__ import annotations

import json
import re
import unicodedata
from collections import Counter
from pathlib import Path
from typing import Any, BinaryIO

from ...errors import OptionError, SourceError
from ...image.sniff import SNIFF_BYTES, sniff_bytes
from ...sources.folder_scan import Rejection
from ...sources.remote.urls import is_url
from .base import SourceOptions, SourceScan
from .label_cells import member_label, missing
from .label_targets import Targets
from .shardlist import fetch_or_reject, list_shards
from .tarread import Members, read_shard

LABEL_EXTENSIONS = ("cls", "txt", "json")
CAPTION_WORDS = 5  # class names run to 4 words ("West Highland white terrier"); captions are longer
CAPTION_WIDTH = 40  # columns: "American Staffordshire terrier" is 30
_CLAUSES = re.compile(r"[,;\uff0c\uff1b\u3001]")  # comma, semicolon, and their CJK forms
ARTICLES = frozenset({"a", "an", "the"})  # in most English captions; in few class names ("hen of the woods")
DEFAULT_JSON_LABEL = "label"


def scan(src: str, options: SourceOptions) -> SourceScan:
    """Every sample of the shards `src` names; remote shards are copied into the spool first, and
    a shard that cannot be read whole is rejected with the samples it held (see `tarread`)."""
    result = SourceScan(root=str(src), kind="webdataset", targets=shard_targets(options.label_column))
    captions: list[tuple[str, Any]] = []
    for shard in list_shards(src):
        local: Path | str | None = shard
        if is_url(shard):
            assert options.spool is not None, "remote shards are fetched only where a spool folder is set"
            local = fetch_or_reject(shard, options.spool, result.rejected)
        if local is None:
            continue
        read = read_shard(str(local), shard, options.spool)
        result.rejected += read.rejected
        if not read.samples:
            continue
        with open(read.path, "rb") as f:
            for key, members in read.samples.items():
                name = f"{shard}#{key}"
                try:
                    image, target, extra = sample_of(f, members, options.label_column, options.image_key)
                except ValueError as exc:
                    result.rejected.append(Rejection(name, str(exc)))
                    continue
                result.add(read.path, name, target, extra, members[image])
                if from_txt(members, options.label_column):
                    captions.append((name, target))
    if not options.label_names:
        refuse_captions(captions, src)
    return result


def from_txt(members: Members, label_key: str | None) -> bool:
    """Whether a sample's label is its free-text `txt` member (no --label-column, no `cls`)."""
    return label_key is None and "cls" not in members and "txt" in members


def refuse_captions(labels: list[tuple[str, Any]], src: str) -> None:
    """SourceError when the labels taken from `txt` members (sample name, label) look like
    captions, as img2dataset writes them: at least 2 of them, more than half the samples with a
    text no other sample has (each caption would become a class of one sample), and most of those
    texts reading as sentences (`reads_as_caption`). Class names pass however few samples each
    has (a few-shot set, a face set of one picture per person)."""
    counts = Counter(label for _, label in labels)
    single = [(name, label) for name, label in labels if counts[label] == 1]
    sentences = [(name, label) for name, label in single if reads_as_caption(label)]
    if len(labels) >= 2 and 2 * len(single) > len(labels) and 2 * len(sentences) > len(single):
        name, label = sentences[0]
        shown = label if len(str(label)) <= 40 else f"{str(label)[:37]}..."
        raise SourceError(f"{src}: the txt members look like captions, not class names ({len(single)} of "
                          f"{len(labels)} samples have a text no other has, e.g. {name}: {shown!r}): pass "
                          "--target text to keep each caption as the sample's target (img2dataset shards), "
                          "--label-column json to keep each json as the sample's extra, "
                          "--label-column KEY for a label under KEY in each json, or --label-names to make each "
                          "text a class")


def reads_as_caption(text: Any) -> bool:
    """Whether a `txt` label reads as a sentence, not a class name: one of its parts between commas
    or semicolons has CAPTION_WORDS words, or is CAPTION_WIDTH columns wide (a wide character, as
    Chinese or Japanese are written without spaces, counts two) with a space or a wide character
    in it; or the whole text has CAPTION_WORDS words, an English article among them ("a tabby cat,
    asleep on the sofa": short clauses). Class names are short, a list of synonyms ("great white
    shark, white shark, man-eater, ...", as ImageNet names) is short parts without articles, and
    one long token of a script with spaces is a name or an identifier, not a sentence
    (iNaturalist's "02913_Plantae_Tracheophyta_..._novae-angliae")."""
    words = [word.strip(".,;:!?\"'()").lower() for word in str(text).split()]
    if len(words) >= CAPTION_WORDS and not ARTICLES.isdisjoint(words):
        return True
    for part in _CLAUSES.split(str(text)):
        widths = [2 if unicodedata.east_asian_width(c) in "WF" else 1 for c in part.strip()]
        count = len(part.split())
        if count >= CAPTION_WORDS or (sum(widths) >= CAPTION_WIDTH and (count > 1 or 2 in widths)):
            return True
    return False


def shard_targets(label_column: str | None) -> Targets:
    """The targets of shards read with `label_column`: `json` takes each whole json member as the
    target (captions, boxes: a dataset without classes)."""
    return Targets(json_targets=label_column == "json")


def image_keys(value: str | tuple[str, ...] | list[str] | None) -> tuple[str, ...] | None:
    """`--image-key` as extensions by preference ("jpg,png" or a sequence); OptionError when bad."""
    if value is None:
        return None
    keys = tuple(k.strip() for k in (value.split(",") if isinstance(value, str) else value))
    if not keys or any(not k or k in LABEL_EXTENSIONS or any(c.isspace() or c == "/" for c in k) for k in keys):
        raise OptionError(f"--image-key {value!r}: give member extensions such as jpg or jpg,png "
                          f"(not {', '.join(LABEL_EXTENSIONS)})")
    return keys


def sample_of(f: BinaryIO, members: Members, label_key: str | None,
              image_key: tuple[str, ...] | None = None) -> tuple[str, Any, Any]:
    """(image extension, target, extra) of one sample; ValueError with the rejection reason."""
    image = _image(f, members, image_key)
    extra = None
    if "json" in members:
        try:
            extra = json.loads(_read(f, members["json"]))
        except ValueError as exc:
            raise ValueError(f"unreadable json member ({exc})") from None
    target = _target(f, members, extra, label_key)
    if missing(target):
        wanted = label_key or f"cls, txt or json '{DEFAULT_JSON_LABEL}'"
        raise ValueError(f"no label ({wanted}; members: {', '.join(sorted(members))})")
    return image, target, extra


def _target(f: BinaryIO, members: Members, extra: Any, label_key: str | None) -> Any:
    """The sample's label: the member or json key `label_key`, else cls, txt, json 'label'."""
    if label_key is not None and label_key in members and label_key != "json":
        return member_label(_read(f, members[label_key]), label_key)
    key = label_key or DEFAULT_JSON_LABEL
    if label_key is None:
        for ext in ("cls", "txt"):
            if ext in members:
                return member_label(_read(f, members[ext]), ext)
    if label_key == "json":  # the whole json member is the target (captions, boxes: no class)
        return extra
    return extra.get(key) if isinstance(extra, dict) else None


def _image(f: BinaryIO, members: Members, image_key: tuple[str, ...] | None) -> str:
    """The extension of the sample's image: the first of `image_key` present, else its only image
    member (by content); several images without `image_key` are ambiguous (a mask beside a photo)."""
    if image_key:
        chosen = next((ext for ext in image_key if ext in members), None)
        if chosen is None or not _is_image(f, members[chosen]):
            what = "none of them" if chosen is None else f"{chosen} is not an image"
            raise ValueError(f"no image (--image-key {','.join(image_key)}: {what}; members: "
                             f"{', '.join(sorted(members))})")
        return chosen
    images = [ext for ext in members if ext not in LABEL_EXTENSIONS and _is_image(f, members[ext])]
    if not images:
        raise ValueError(f"no image (members: {', '.join(sorted(members)) or 'none'})")
    if len(images) > 1:
        raise ValueError(f"several images ({', '.join(images)}: choose one with --image-key, e.g. "
                         f"--image-key {images[-1]})")
    return images[0]


def _is_image(f: BinaryIO, span: tuple[int, int]) -> bool:
    offset, size = span
    f.seek(offset)
    return size > 0 and sniff_bytes(f.read(min(size, SNIFF_BYTES))) is not None


def _read(f: BinaryIO, span: tuple[int, int]) -> bytes:
    offset, size = span
    f.seek(offset)
    data: bytes = f.read(size)
    return data
