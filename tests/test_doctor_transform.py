"""`iofeed doctor` names "your transform is the bottleneck" from the stats the traced command's
loaders write (`IOFEED_STATS_DIR`), and stays silent when the transform is cheap."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

import iofeed
from helpers import transforms as T
from iofeed.cli.doctor.patterns import transform_finding
from iofeed.cli.doctor.run import run_doctor
from iofeed.loading.stats_file import STATS_DIR_ENV, read_stats


def stats(wait: float, transform: float, elapsed: float = 10.0, workers: int = 2) -> dict:
    return {"images": 1000, "wait_seconds": wait, "transform_seconds": transform, "elapsed_seconds": elapsed,
            "workers": workers, "worker_cpu_seconds": 20.0, "transform_ms_per_image": transform,
            "settings": {"transform": "augment.heavy"}}


def test_the_finding_needs_both_a_waiting_loop_and_a_busy_transform():
    finding = transform_finding([stats(wait=6.0, transform=15.0)])
    assert finding is not None and finding.code == "transform-bottleneck"
    assert "your transform is the bottleneck" in finding.title and "augment.heavy" in finding.title
    assert "75%" in finding.evidence[0] and "60%" in finding.evidence[1]
    assert transform_finding([stats(wait=0.5, transform=15.0)]) is None  # the loop hardly waits
    assert transform_finding([stats(wait=6.0, transform=4.0)]) is None  # the transform is a fifth of the time
    no_transform = {**stats(6.0, 15.0), "settings": {"transform": None}}
    assert transform_finding([no_transform]) is None and transform_finding([]) is None


def test_a_loader_writes_its_stats_where_the_doctor_reads_them(colour_dataset, tmp_path, monkeypatch):
    monkeypatch.setenv(STATS_DIR_ENV, str(tmp_path))
    with iofeed.loader(colour_dataset, batch_size=4, image_size=32, workers=1, transform=T.jitter) as ld:
        for _ in ld:
            pass
    (written,) = read_stats(tmp_path)
    assert written["images"] == 32 and written["settings"]["transform"] == "helpers.transforms.jitter"
    assert written["workers"] == 1 and written["elapsed_seconds"] > 0
    assert 0 < written["transform_seconds"] < written["worker_cpu_seconds"]


@pytest.mark.slow
@pytest.mark.parametrize("transform, named", [("heavy", True), ("jitter", False)])
def test_doctor_names_a_heavy_transform(colour_dataset, transform, named):
    tests = str(Path(__file__).resolve().parent)  # `helpers` for the traced process, as pytest's pythonpath has it
    code = (f"import sys\nsys.path.insert(0, {tests!r})\nimport iofeed, time\nfrom helpers import transforms as T\n"
            f"with iofeed.loader({str(colour_dataset)!r}, batch_size=4, image_size=64, workers=1, "
            f"transform=T.{transform}) as ld:\n"
            "    for epoch in range(3):\n        for batch in ld:\n            time.sleep(0.005)\n")
    checkup = run_doctor(command=[sys.executable, "-c", code])
    assert checkup.exit_status() == 0, "the traced command ran to its end"
    codes = {f.code for f in checkup.findings}
    assert ("transform-bottleneck" in codes) == named, checkup.findings
