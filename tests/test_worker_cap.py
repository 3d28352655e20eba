"""Worker counts beyond the machine (issue 22.12): capped at two per usable core, with a warning."""
from __future__ import annotations

import os

import pytest

import iofeed
from iofeed.runtime.processes import WORKERS_PER_CORE, resolve_workers


@pytest.fixture
def one_core():
    """This process restricted to one CPU (the usable cores follow the affinity)."""
    before = os.sched_getaffinity(0)
    os.sched_setaffinity(0, {min(before)})
    try:
        yield
    finally:
        os.sched_setaffinity(0, before)


def test_a_thousand_workers_on_one_core_are_capped_with_a_warning(one_core, colour_dataset):
    with pytest.warns(RuntimeWarning, match=r"workers=1000 is more than 2 per usable core \(1: affinity 1"):
        assert resolve_workers(1000) == WORKERS_PER_CORE
    with pytest.warns(RuntimeWarning, match="using 2"):
        ld = iofeed.loader(colour_dataset, batch_size=4, workers=1000, image_size=32)
    with ld:
        assert ld.stats.settings["workers"] == 2 and len(list(ld)) == len(ld)
    assert resolve_workers(2) == 2  # within the cap: as given
