"""What a newcomer reads: the CLI's reports say what their numbers are, in plain counts (issue 23.10)."""
from __future__ import annotations

import json
from pathlib import Path

from iofeed.cli.bench.report import table
from iofeed.cli.main import main
from iofeed.prepare.run import ImagePolicy, preprocess

RESULTS = Path(__file__).resolve().parents[1] / "bench" / "results" / "ab-2026-11-24" / "main-job-final.json"


def test_inspect_counts_in_words_and_gives_raw_pixels_no_quality(colour_tree, tmp_path, capsys):
    raw = tmp_path / "raw.iof"
    preprocess(colour_tree, raw, policy=ImagePolicy(format="raw"), val_per_class=2, progress=False, workers=1)
    assert main(["inspect", str(raw)]) == 0
    printed = capsys.readouterr().out
    assert "in 1 shard," in printed and "1 shards" not in printed
    images = next(line for line in printed.splitlines() if line.lstrip().startswith("images"))
    assert images.split() == ["images", "raw,", "shorter", "side", "256"], images  # was "..., quality 90"


def test_index_counts_one_shard_in_words(tmp_path, capsys):
    import io
    import tarfile

    from helpers.sources import encode, picture

    shard = tmp_path / "shard.tar"
    with tarfile.open(shard, "w") as tar:
        for ext, data in (("jpg", encode(picture(0), "jpg")), ("cls", b"0")):
            info = tarfile.TarInfo(f"s0.{ext}")
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    assert main(["index", str(shard), "-o", str(tmp_path / "ds.iof")]) == 0
    printed = capsys.readouterr().out
    assert "1 sample in 1 shard (read in place)" in printed, printed


def test_inspect_of_a_missing_path_says_so(tmp_path, capsys):
    """It used to say `iofeed.json is missing` for a folder that does not exist at all."""
    assert main(["inspect", str(tmp_path / "nope.iof")]) == 1
    err = capsys.readouterr().err
    assert err.startswith(f"iofeed: error: no such path: {tmp_path / 'nope.iof'}") and err.count("\n") == 1


def test_bench_table_explains_its_columns_and_gives_skipped_feeds_their_reason_on_their_row():
    record = json.loads(RESULTS.read_text())
    lines = table(record).splitlines()
    skipped = next(line for line in lines if line.startswith("iofeed-raw-gpu"))
    assert skipped.split(None, 1)[1] == "skipped: augments on the GPU: needs a CUDA GPU"
    assert "core busy %" in lines[0] and "CPU % per core" not in lines[0]
    assert any(line.strip().startswith("core busy %: each core of the machine (0/1/...)") for line in lines)
    assert sum("augments on the GPU" in line for line in lines) == 1, "the reason once, on the feed's row"


ROOT = Path(__file__).resolve().parents[1]


def test_one_word_for_what_makes_the_batches_and_feed_only_for_the_bench():
    """Issue 40: the option, the stats and the docs say "engine" (Keras' and JAX's own backends keep
    theirs, and a library's own `nv.Backend`); "feed" names the bench's contenders, and no class
    outside the bench."""
    import re

    texts = {p: p.read_text() for p in [*(ROOT / "src" / "iofeed").rglob("*.py"), ROOT / "README.md",
                                        *(ROOT / "docs").glob("*.md"), *(ROOT / "docs" / "frameworks").glob("*.md")]}
    spellings = ROOT / "src" / "iofeed" / "options" / "spellings.py"  # where the earlier spelling is refused
    said = [f"{p.relative_to(ROOT)}: {m.group(0)}" for p, text in texts.items() if p != spellings
            for m in re.finditer(r"\bbackend=|[\"']backend[\"']|(?<![.\w])Backend\b|\bbackends/", text)]
    assert said == [], said
    bench = ROOT / "src" / "iofeed" / "cli" / "bench"
    feeds = [f"{p.relative_to(ROOT)}: {m.group(0)}" for p, text in texts.items()
             if p.suffix == ".py" and bench not in p.parents
             for m in re.finditer(r"\bclass \w*Feed\w*|\b_?feed\b\s*=", text)
             if m.group(0) != "class FeedUnavailable"]  # the bench's error, with the others in errors.py
    assert feeds == [], feeds
