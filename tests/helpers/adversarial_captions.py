"""Adversarial image-text shards as img2dataset writes them: `00000.tar` .. holding members
`000000000.jpg`, `.txt` (the caption) and `.json` (key, url, caption, width, height, ...), with
`00000_stats.json` and `00000.parquet` beside each shard. Each image's pixels encode its sample
number (`pixelcode.py`) and its caption spells the same number, in words and characters beyond
ASCII, so a caption delivered with another sample's image shows. Damages: a caption in another
encoding (latin-1 bytes), a missing caption (one found in the json instead, one nowhere), empty
captions, a malformed json."""
from __future__ import annotations

import json
from pathlib import Path

from helpers.pixelcode import Item, Source, coded_jpeg

SHARDS, PER_SHARD = 3, 8
DAMAGES = ("clean", "other_encoding", "missing_caption", "empty_caption", "malformed_json")
THINGS = ("kite", "café au lait", "東京の夜景", "tabby cat 🐈", "barn", "Straße")


def caption_of(sample: int) -> str:
    """Sample `sample`'s caption: its number twice (digits and words), exact text beyond ASCII."""
    return f"photo {sample:04d}: a {THINGS[sample % len(THINGS)]}, number {sample} of the set\n"


def key_of(sample: int) -> str:
    """img2dataset's 9-digit key: the shard's number, then the sample's place in it."""
    return f"{sample // PER_SHARD:05d}{sample % PER_SHARD:04d}"


def captions(root: Path, damage: str) -> Source:
    """Three img2dataset shards of 8 samples, damaged as `damage` says; `Item.expect` is the
    caption each kept sample must arrive with (None: it must be rejected, with `refusal`'s reason)."""
    from helpers.adversarial import write_tar  # here: adversarial.py imports this module to list it

    folder = root / "i2d"
    folder.mkdir(parents=True)
    items = [Item(i, caption_of(i), caption_of(i)) for i in range(SHARDS * PER_SHARD)]
    source = Source("captions", damage, str(folder / "{00000..00002}.tar"), items, [], options={"target": "text"})
    txt = {i.sample: i.label.encode("utf-8") for i in items}
    meta = {i.sample: json.dumps({"key": key_of(i.sample), "url": f"https://example.com/{i.sample}.jpg",
                                  "caption": i.label, "width": 32, "height": 32, "status": "success",
                                  "error_message": None}).encode("utf-8") for i in items}
    if damage == "other_encoding":  # latin-1 bytes of "café": never guessed, rejected naming the byte
        txt[1] = items[1].label.encode("latin-1")
        items[1].expect = None
        source.refusal = r"caption not UTF-8 \(its txt member: byte 0xe9"
    if damage == "missing_caption":  # no txt: the json's caption is taken; no txt and no caption: rejected
        del txt[4]
        del txt[9]
        meta[9] = json.dumps({"key": key_of(9), "caption": None}).encode()
        items[9].expect = None
        source.refusal = r"no caption \(txt member or json 'caption'"
    if damage == "empty_caption":
        txt[2], txt[10] = b"", b"  \n"
        items[2].expect = items[10].expect = None
        source.refusal = r"empty caption \(its txt member is blank\)"
    if damage == "malformed_json":
        meta[12] = meta[12][:-5]
        items[12].expect = None
        source.refusal = r"unreadable json member"
    for s in range(SHARDS):
        members = []
        for i in items[s * PER_SHARD:(s + 1) * PER_SHARD]:
            key = key_of(i.sample)
            members.append((f"{key}.jpg", coded_jpeg(1, i.sample)))
            if i.sample in txt:
                members.append((f"{key}.txt", txt[i.sample]))
            members.append((f"{key}.json", meta[i.sample]))
        shard = folder / f"{s:05d}.tar"
        write_tar(shard, members)
        source.shards.append(shard)
        (folder / f"{s:05d}_stats.json").write_text(json.dumps({"count": PER_SHARD, "successes": PER_SHARD}))
        (folder / f"{s:05d}.parquet").write_bytes(b"PAR1" + b"\0" * 16 + b"PAR1")  # beside, never read as a shard
    return source
