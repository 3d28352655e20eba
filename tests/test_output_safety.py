"""preprocess never loses data: guarded --overwrite, locked OUT, atomic swap, signals, leftovers."""
from __future__ import annotations

import os
import resource
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from helpers.images import jpeg_bytes, make_image_tree, smooth_rgb
from iofeed.cli.main import main
from iofeed.errors import OptionError
from iofeed.prepare.output import _signals_held, lock_output, lock_path
from iofeed.prepare.run import preprocess
from iofeed.prepare.verify import verify_dataset

WAIT_S = 180  # every wait on a child is bounded: a regression fails, never hangs CI


def _files(root: Path) -> set[Path]:
    return {p for p in root.rglob("*") if p.is_file()}


def _one_line_error(capsys, status: int, *words: str) -> str:
    text = capsys.readouterr().err
    err = text.strip().splitlines()[-1]  # after the progress bar, if any
    assert status == 1 and err.startswith("iofeed: error:") and "Traceback" not in text, text
    for word in words:
        assert word in err, err
    return err


def _slow_tree(root: Path, images: int = 60) -> Path:
    """A tree that takes a few seconds to prepare with one worker (large images to resize)."""
    for i in range(images):
        folder = root / f"{i % 3:03d}.c{i % 3}"
        folder.mkdir(parents=True, exist_ok=True)
        (folder / f"{i:04d}.jpg").write_bytes(jpeg_bytes(smooth_rgb(1400, 1000, seed=i)))
    return root


def _start(*args: str, **kwargs) -> subprocess.Popen:
    """`iofeed preprocess ARGS` in a new session (its whole group can be cleaned up)."""
    return subprocess.Popen([sys.executable, "-m", "iofeed.cli.main", "preprocess", *args, "--workers", "1"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True,
                            **kwargs)


def _wait_for(predicate, proc: subprocess.Popen) -> None:
    deadline = time.monotonic() + WAIT_S
    while not predicate():
        assert proc.poll() is None, f"the run ended first: {proc.communicate()}"
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.01)


def _finish(proc: subprocess.Popen) -> tuple[int, str, str]:
    try:
        out, err = proc.communicate(timeout=WAIT_S)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.communicate()
    return proc.returncode, out, err


def _partials(out: Path) -> list[Path]:
    return list(out.parent.glob(f".{out.name}.partial-*"))


# ------------------------------------------------------------------ item 1: what --overwrite may delete


@pytest.mark.parametrize("where", ["cwd", "src", "parent of src", "inside src", "cwd's parent"])
def test_overwrite_refuses_sources_and_the_cwd(tmp_path, monkeypatch, capsys, where):
    src, here = tmp_path / "work" / "src", tmp_path / "here"
    make_image_tree(src, classes=2, per_class=2)
    (here / "sub").mkdir(parents=True)
    (here / "notes.txt").write_text("mine")
    monkeypatch.chdir(here / "sub" if where == "cwd's parent" else here)
    out = {"cwd": Path("."), "src": src, "parent of src": src.parent, "inside src": src / "out.iof",
           "cwd's parent": here}[where]
    before = _files(tmp_path)
    status = main(["preprocess", str(src), "-o", str(out), "--overwrite", "--workers", "1"])
    _one_line_error(capsys, status, str(out))
    assert _files(tmp_path) == before


@pytest.mark.parametrize("kind", ["folder", "file"])
def test_overwrite_replaces_only_an_iofeed_dataset(image_tree, tmp_path, capsys, kind):
    src, _ = image_tree
    precious = tmp_path / "precious"
    if kind == "folder":
        precious.mkdir()
        (precious / "thesis.tex").write_text("years of work")
    else:
        precious.write_text("years of work")
    status = main(["preprocess", str(src), "-o", str(precious), "--overwrite", "--workers", "1"])
    _one_line_error(capsys, status, "precious", "not")
    assert (precious / "thesis.tex" if kind == "folder" else precious).read_text() == "years of work"


USER_FILES = {"backup-000001.tar": b"my backup", "old-samples.npy": b"my array", "my-targets.jsonl": b"my targets",
              "notes-000002.idx": b"my index"}


@pytest.mark.parametrize("name", sorted(USER_FILES))
def test_overwrite_keeps_user_files_named_like_iofeeds_own(image_tree, tmp_path, capsys, name):
    """Only the files the manifest lists are iofeed's: a user's file named like a shard, a table
    or a targets file refuses the overwrite, named, and keeps its bytes."""
    src, _ = image_tree
    out = tmp_path / "ds.iof"
    assert main(["preprocess", str(src), "-o", str(out), "--workers", "1"]) == 0
    (out / name).write_bytes(USER_FILES[name])
    before = {p.name: p.read_bytes() for p in out.iterdir()}
    status = main(["preprocess", str(src), "-o", str(out), "--overwrite", "--workers", "1"])
    _one_line_error(capsys, status, name, "iofeed did not write")
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before


def test_overwrite_never_deletes_shards_indexed_in_place(image_tree, tmp_path, capsys):
    """A dataset `iofeed index` wrote beside the shards it read in place: those shards are the
    user's only copy, so replacing the dataset is refused naming them, every byte kept."""
    from helpers.adversarial import build

    src, _ = image_tree
    shards = build("webdataset", "clean", tmp_path / "wds").shards
    out = tmp_path / "ds.iof"
    out.mkdir()
    for shard in shards:  # the user keeps the shards in the dataset's folder
        shard.rename(out / shard.name)
    spec = str(out / "shard-{000000..000002}.tar")
    assert main(["index", spec, "-o", str(tmp_path / "made.iof")]) == 0
    for made in (tmp_path / "made.iof").iterdir():  # ... and the index files beside them
        made.rename(out / made.name)
    before = {p.name: p.read_bytes() for p in out.iterdir()}
    assert {"shard-000000.tar", "iofeed.json", "shard-000000.idx"} <= set(before)
    status = main(["preprocess", str(src), "-o", str(out), "--overwrite", "--workers", "1"])
    _one_line_error(capsys, status, "shard-000000.tar", "iofeed did not write")
    status = main(["index", str(tmp_path / "wds2" / "x.tar"), "-o", str(out), "--overwrite"])
    assert status == 1
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before


def test_overwrite_replaces_every_file_the_manifest_lists(image_tree, tmp_path):
    """The refusals above are not all refusals: a dataset holding only what iofeed wrote (a val
    split, a targets file, a source list) is replaced whole."""
    src, _ = image_tree
    out = tmp_path / "ds.iof"
    assert main(["preprocess", str(src), "-o", str(out), "--workers", "1", "--val-fraction", "0.5"]) == 0
    assert {"val-samples.npy", "val-samples.sources.jsonl"} <= {p.name for p in out.iterdir()}
    old_id = (out / "iofeed.json").read_text()
    assert main(["preprocess", str(src), "-o", str(out), "--overwrite", "--workers", "1", "--val-fraction", "0"]) == 0
    assert (out / "iofeed.json").read_text() != old_id and not (out / "val-samples.npy").exists()


# ------------------------------------------------------------------ item 2: the swap


def test_signals_are_held_between_the_two_renames():
    caught = []
    previous = signal.signal(signal.SIGINT, lambda *_: caught.append(time.monotonic()))
    try:
        with _signals_held():
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(0.05)
            assert not caught, "delivered inside the swap"
        assert caught, "delivered once the swap is done"
    finally:
        signal.signal(signal.SIGINT, previous)


def test_a_swap_killed_between_its_renames_is_recovered(image_tree, tmp_path):
    """kill -9 after the old dataset went aside and before the new one came in: the next run
    puts the old one back before anything else, and the dataset is never half deleted."""
    src, expected = image_tree
    out = tmp_path / "o.iof"
    preprocess(src, out, progress=False, workers=1)
    out.rename(tmp_path / ".o.iof.replaced-99999")
    (tmp_path / ".o.iof.partial-99999").mkdir()
    with pytest.raises(OptionError, match="already exists"):  # the old dataset is back at OUT
        preprocess(src, out, progress=False, workers=1)
    summary = preprocess(src, out, progress=False, workers=1, overwrite=True)
    assert not verify_dataset(out).problems and sum(summary.written.values()) == len(expected)
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith(".")) == []


def test_ctrl_c_during_overwrite_keeps_the_old_dataset_whole(tmp_path):
    src = _slow_tree(tmp_path / "src", images=30)
    out = tmp_path / "o.iof"
    preprocess(src, out, progress=False, workers=1)
    old_id = (out / "iofeed.json").read_text()
    proc = _start(str(src), "-o", str(out), "--overwrite")
    _wait_for(lambda: _partials(out), proc)
    proc.send_signal(signal.SIGINT)
    status, _, err = _finish(proc)
    assert status == 130 and "interrupted" in err
    assert (out / "iofeed.json").read_text() == old_id and not verify_dataset(out).problems
    assert not _partials(out) and not lock_path(out).exists()


# ------------------------------------------------------------------ item 3: SIGTERM and kill -9


def test_sigterm_cleans_up_like_ctrl_c(tmp_path):
    src = _slow_tree(tmp_path / "src")
    out = tmp_path / "o.iof"
    proc = _start(str(src), "-o", str(out))
    _wait_for(lambda: _partials(out), proc)
    proc.terminate()
    status, _, err = _finish(proc)
    assert status == 130 and "interrupted" in err
    assert not out.exists() and not _partials(out) and not lock_path(out).exists()


def test_kill_9_leftovers_are_removed_and_reported_by_the_next_run(tmp_path):
    src = _slow_tree(tmp_path / "src")
    out = tmp_path / "o.iof"
    proc = _start(str(src), "-o", str(out))
    _wait_for(lambda: _partials(out), proc)
    os.killpg(proc.pid, signal.SIGKILL)
    _finish(proc)
    stale = _partials(out)
    assert stale, "kill -9 cannot clean up"
    done = subprocess.run([sys.executable, "-m", "iofeed.cli.main", "preprocess", str(src), "-o", str(out),
                           "--workers", "2"], capture_output=True, text=True, timeout=WAIT_S * 3)
    assert done.returncode == 0, done.stderr
    assert f"removed       {stale[0]}" in done.stdout
    assert not _partials(out) and not verify_dataset(out).problems


# ------------------------------------------------------------------ item 4: one run per OUT


def test_a_second_run_into_the_same_output_fails_with_the_lock_named(image_tree, tmp_path):
    src, _ = image_tree
    out = tmp_path / "o.iof"
    with lock_output(out):  # another run (a flock is per open file: a second open conflicts, any PID)
        second = subprocess.run([sys.executable, "-m", "iofeed.cli.main", "preprocess", str(src), "-o", str(out),
                                 "--workers", "1"], capture_output=True, text=True, timeout=WAIT_S)
        assert second.returncode == 1 and len(second.stderr.strip().splitlines()) == 1, second.stderr
        assert "another iofeed run" in second.stderr and str(lock_path(out)) in second.stderr
        assert not out.exists()
    assert not lock_path(out).exists(), "the lock file goes with its run"
    preprocess(src, out, progress=False, workers=1)  # free again


def test_a_folder_created_at_out_meanwhile_is_kept(tmp_path):
    src = _slow_tree(tmp_path / "src")
    out = tmp_path / "o.iof"
    proc = _start(str(src), "-o", str(out))
    _wait_for(lambda: _partials(out), proc)
    out.mkdir()
    (out / "mine.txt").write_text("not yours")
    status, _, err = _finish(proc)
    assert status == 1 and "already exists" in err
    assert (out / "mine.txt").read_text() == "not yours" and not _partials(out)


# ------------------------------------------------------------------ item 10: one-line errors


@pytest.mark.parametrize("argv, words", [
    (["--shard-mb", "nan"], ["--shard-mb", "nan"]),
    (["--shard-mb", "-1"], ["--shard-mb"]),
    (["--seed", "-1"], ["--seed", "-1"]),
])
def test_bad_numbers_are_one_line_errors(image_tree, tmp_path, capsys, argv, words):
    src, _ = image_tree
    status = main(["preprocess", str(src), "-o", str(tmp_path / "o.iof"), "--workers", "1", *argv])
    _one_line_error(capsys, status, *words)


def test_a_full_disk_is_a_one_line_error(image_tree, tmp_path):
    """A file size limit makes writes fail as a full disk does (EFBIG there, ENOSPC here): the
    same OSError path, one line, nothing left behind."""
    src, _ = image_tree
    out = tmp_path / "o.iof"

    def limit() -> None:
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (20_000, 20_000))

    done = subprocess.run([sys.executable, "-m", "iofeed.cli.main", "preprocess", str(src), "-o", str(out),
                           "--workers", "1"], capture_output=True, text=True, timeout=WAIT_S, preexec_fn=limit)
    last = done.stderr.strip().splitlines()[-1]  # after the progress bar
    assert done.returncode == 1 and last.startswith("iofeed: error: cannot write") and "Traceback" not in done.stderr
    assert not out.exists() and not _partials(out)


@pytest.fixture
def small_mount(tmp_path):
    """A 2 MiB tmpfs (needs the right to mount, which root in CI containers has)."""
    point = tmp_path / "mnt"
    point.mkdir()
    if os.geteuid() != 0 or subprocess.run(["mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", str(point)],
                                           capture_output=True).returncode:
        pytest.skip("cannot mount a tmpfs here (test_a_full_disk_is_a_one_line_error covers the path)")
    yield point
    subprocess.run(["umount", "-l", str(point)], check=False)


def test_no_space_left_is_a_one_line_error(tmp_path, small_mount, capsys):
    src = _slow_tree(tmp_path / "src", images=12)
    status = main(["preprocess", str(src), "-o", str(small_mount / "o.iof"), "--workers", "1", "--size", "1000",
                   "--quality", "100"])
    _one_line_error(capsys, status, "No space left on device", "free some space")
    assert list(small_mount.iterdir()) == []


@pytest.fixture
def read_only_dir(tmp_path):
    """A directory this process cannot write: a read-only tmpfs as root, else mode 0555."""
    point = tmp_path / "ro"
    point.mkdir()
    if os.geteuid() != 0:
        point.chmod(0o555)
        yield point
        point.chmod(0o755)
        return
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m,ro", "tmpfs", str(point)],
                      capture_output=True).returncode:
        pytest.skip("root without the right to mount: nothing here is read-only to it")
    yield point
    subprocess.run(["umount", "-l", str(point)], check=False)


def test_read_only_output_is_a_one_line_error(image_tree, read_only_dir, capsys):
    src, _ = image_tree
    status = main(["preprocess", str(src), "-o", str(read_only_dir / "o.iof"), "--workers", "1"])
    _one_line_error(capsys, status, "cannot write", "o.iof")
    assert list(read_only_dir.iterdir()) == []
