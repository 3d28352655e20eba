"""The skip bound (issue 22.3): skipped samples are counted, and past `max_skipped` of an epoch, or
when an epoch delivers nothing, they raise a SampleError with the counts and the first files."""
from __future__ import annotations

import shutil
from pathlib import Path

import pytest

import iofeed
from helpers.images import make_colour_tree
from iofeed.errors import OptionError, SampleError


def _truncate_all(root: Path) -> int:
    files = sorted(root.rglob("*.jpg"))
    for f in files:
        data = f.read_bytes()
        f.write_bytes(data[: len(data) // 3])
    return len(files)


def test_an_epoch_of_truncated_jpegs_raises_instead_of_yielding_nothing(tmp_path):
    root = make_colour_tree(tmp_path / "t", per_class=3)
    count = _truncate_all(root)
    with iofeed.loader(root, batch_size=4, workers=1, drop_last=False, skips=iofeed.Skips(max_skipped=1.0)) as ld:
        with pytest.raises(SampleError) as info:
            list(ld)
    message = str(info.value)
    assert "delivered no batch" in message and f"all {count} of its samples" in message
    assert f"corrupt or truncated image {count}" in message and ".jpg" in message and "\n" not in message


def test_the_default_bound_stops_an_epoch_with_ten_percent_bad(tmp_path):
    root = make_colour_tree(tmp_path / "t", per_class=10, corrupt=4)  # 4 of 44: 9%
    with iofeed.loader(root, batch_size=4, workers=1, drop_last=False) as ld:
        with pytest.raises(SampleError, match=r"skipped \d of its 44 samples .*max_skipped=0.05.*bad\d.jpg"):
            list(ld)


def test_a_higher_bound_lets_the_epoch_through_with_its_counts(tmp_path):
    root = make_colour_tree(tmp_path / "t", per_class=10, corrupt=4)
    with iofeed.loader(root, batch_size=4, workers=1, drop_last=False, skips=iofeed.Skips(max_skipped=0.1)) as ld:
        delivered = sum(len(labels) for _, labels in ld)
        assert delivered == 44 and ld.stats.skipped["corrupt or truncated image"] == ld.stats.refilled == 4


@pytest.mark.parametrize("first", ["whole", "part"])
def test_set_epoch_to_the_current_epoch_begins_a_new_skip_budget(tmp_path, first):
    """4 bad of 44 under max_skipped=0.1 (4.4): each pass of the epoch within its bound. Begun again
    from its first batch by set_epoch (after the whole epoch, or after a part of it), the epoch
    counts its skips afresh: carried over, the second pass's 4 made 8 and raised."""
    root = make_colour_tree(tmp_path / "t", per_class=10, corrupt=4)
    with iofeed.loader(root, batch_size=4, workers=1, drop_last=False, skips=iofeed.Skips(max_skipped=0.1),
                       shuffle=False) as ld:
        if first == "whole":
            assert sum(len(labels) for _, labels in ld) == 44
        else:
            read = 0
            for _ in ld:  # past every bad sample (read in order), then left
                read += 1
                if ld.stats.skipped["corrupt or truncated image"] == 4:
                    break
            assert read < len(ld)
        ld.set_epoch(0)
        assert sum(len(labels) for _, labels in ld) == 44
        assert ld.stats.skipped["corrupt or truncated image"] == 8  # both passes counted in the stats


def test_the_bound_is_hit_early_not_only_at_the_end(tmp_path):
    """Skips already past the bound raise before the rest of the epoch is read."""
    root = make_colour_tree(tmp_path / "t", per_class=10)
    for f in sorted((root / "001.colour0").glob("*.jpg")):  # read first in order: one class all bad
        f.write_bytes(f.read_bytes()[:100])
    with iofeed.loader(root, batch_size=4, workers=1, split="val", skips=iofeed.Skips(max_skipped=0.1)) as ld:
        with pytest.raises(SampleError, match=r"more than Skips\.max_skipped=0\.1"):
            list(ld)
        assert ld.stats.batches + ld.stats.skipped_batches < len(ld)


def test_zero_bound_raises_at_the_first_skip_and_none_never(tmp_path):
    root = make_colour_tree(tmp_path / "t", per_class=10, corrupt=1)
    with iofeed.loader(root, batch_size=4, workers=1, skips=iofeed.Skips(max_skipped=0)) as ld:
        with pytest.raises(SampleError, match="skipped 1 of"):
            list(ld)
    _truncate_all(root)
    with iofeed.loader(root, batch_size=4, workers=1, skips=iofeed.Skips(max_skipped=None)) as ld:
        assert list(ld) == [] and ld.stats.skipped["corrupt or truncated image"] == 40  # drop_last: 10 batches of 4


def test_files_the_scan_rejected_count_when_the_loader_is_made(tmp_path):
    root = make_colour_tree(tmp_path / "t", per_class=4)
    for i in range(3):
        (root / "001.colour0" / f"empty{i}.jpg").write_bytes(b"")
    (root / ".DS_Store").write_bytes(b"x")
    (root / "README.md").write_text("not a sample")
    with pytest.raises(SampleError, match=r"3 of 19 files in its class folders were rejected .*empty file 3"):
        iofeed.loader(root, batch_size=4, workers=1)
    shutil.rmtree(root / "001.colour0")
    with iofeed.loader(root, batch_size=4, workers=1) as ld:  # hidden files and root files are not samples
        assert ld.stats.skipped["hidden file or folder"] == 1 and len(list(ld)) == 3


@pytest.mark.parametrize("bad", [-0.1, 1.5, "5%", True, float("nan")])
def test_bad_max_skipped_is_one_line(tmp_path, bad):
    with pytest.raises(OptionError, match="max_skipped must be a fraction"):
        iofeed.loader(tmp_path, batch_size=4, skips=iofeed.Skips(max_skipped=bad))
