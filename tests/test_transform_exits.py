"""A transform that ends or crashes its worker, or runs out of memory: the error says what happened,
in which transform, on which sample (the red one: its pixels say it is class 0), and under which
memory limit; nothing is skipped as if the sample were bad."""
from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

import iofeed
from helpers import transforms as T
from iofeed.errors import WorkerError

SMALL = {"batch_size": 4, "image_size": 32, "seed": 5, "workers": 1}


def _named_sample(colour_dataset: Path, message: str) -> int:
    """The label of the one sample `message` names (by its shard@offset path)."""
    source = iofeed.sources.samples.open_source(colour_dataset, "train")
    paths = {source.path_of(i): int(source.label[i]) for i in range(len(source.label))}
    named = [p for p in re.findall(r"\S+\.tar@\d+", message) if p in paths]
    assert len(named) == 1, message
    return paths[named[0]]


def _first_error(colour_dataset: Path, transform, **options) -> str:
    with iofeed.loader(colour_dataset, transform=transform, **SMALL, **options) as ld:
        with pytest.raises(WorkerError) as info:
            for _ in ld:
                pass
    message = str(info.value)
    assert "\n" not in message
    return message


def test_sys_exit_in_a_transform_is_named_with_its_sample(colour_dataset):
    message = _first_error(colour_dataset, T.exits_on_red)
    assert "transform helpers.transforms.exits_on_red called sys.exit(3): a transform must return the image" in message
    assert "printed above" not in message and _named_sample(colour_dataset, message) == 0


def test_keyboard_interrupt_raised_by_a_transform_is_named_not_called_an_exit(colour_dataset):
    """It was reported as "the transform ended its worker (os._exit or sys.exit)": workers ignore
    SIGINT, so a KeyboardInterrupt there is the transform's own raise, said as such."""
    message = _first_error(colour_dataset, T.interrupts_on_red)
    assert "transform helpers.transforms.interrupts_on_red raised KeyboardInterrupt in a loader worker" in message
    assert "os._exit" not in message and "sys.exit" not in message, message
    assert _named_sample(colour_dataset, message) == 0


@pytest.mark.parametrize("transform, how", [
    (T.os_exit_on_red, "exited with status 7 while running transform helpers.transforms.os_exit_on_red on sample "),
    (T.signal_on_red, "died with signal SIGTERM while running transform helpers.transforms.signal_on_red on sample "),
])
def test_a_worker_ended_in_a_transform_names_the_transform_and_its_sample(colour_dataset, transform, how):
    """os._exit prints nothing: "its error is printed above" pointed at nothing."""
    message = _first_error(colour_dataset, transform)
    assert re.match(r"loader worker \(pid \d+\) ", message) and how in message, message
    assert "printed above" not in message and _named_sample(colour_dataset, message) == 0


def test_out_of_memory_in_a_transform_names_the_limit_and_skips_nothing(colour_dataset):
    """Under `ulimit -v` a MemoryError is the limit's, not the sample's: it was skipped and counted
    as a bad sample (healthy samples lost), then blamed them past max_skipped."""
    message = _first_error(colour_dataset, T.over_a_limit_on_red, skips=iofeed.Skips(max_skipped=None))
    assert message.startswith("out of memory in transform helpers.transforms.over_a_limit_on_red on sample ")
    assert re.search(r"the address-space limit RLIMIT_AS \(`ulimit -v`\) is \d+\.\d\d GiB", message), message
    assert "raise it (`ulimit -v unlimited`), or lower workers or batch_size" in message
    assert _named_sample(colour_dataset, message) == 0


def test_a_worker_crash_under_ulimit_v_names_the_limit(colour_dataset, tmp_path):
    """A real `ulimit -v` on the caller, inherited by its workers (8 GiB above what the caller maps,
    room for the workers' own libraries), and a worker that dies while a sample is read."""
    tests = str(Path(__file__).resolve().parent)
    code = f"""
import resource, sys
sys.path.insert(0, {tests!r})
import iofeed
from helpers import transforms as T
size = int(open("/proc/self/statm").read().split()[0]) * resource.getpagesize()
resource.setrlimit(resource.RLIMIT_AS, (size + (8 << 30), resource.RLIM_INFINITY))
try:
    with iofeed.loader({str(colour_dataset)!r}, transform=T.signal_on_red, **{SMALL!r}) as ld:
        for _ in ld:
            pass
except iofeed.errors.WorkerError as exc:
    print(exc)
"""
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    message = run.stdout.strip()
    assert run.returncode == 0 and "died with signal SIGTERM while running transform" in message, run.stderr[-2000:]
    assert re.search(r"it ran under an address-space limit RLIMIT_AS \(`ulimit -v`\) of \d+\.\d\d GiB", message)
    assert _named_sample(colour_dataset, message) == 0


def test_a_library_that_cannot_be_mapped_is_out_of_memory_not_the_samples_fault(colour_dataset):
    """Under a tight `ulimit -v` the first import of a C extension fails with an ImportError
    ("failed to map segment from shared object"): it was blamed on the sample being read."""
    message = _first_error(colour_dataset, T.maps_a_library_on_red)
    assert message.startswith("out of memory in transform helpers.transforms.maps_a_library_on_red on sample ")
    assert "(the sample is likely healthy)" in message and _named_sample(colour_dataset, message) == 0
