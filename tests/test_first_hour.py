"""The first hour with iofeed, as someone new to it spends it (issue 38): what the README reads
is made by the README, a shard passed as the source names its dataset, `bench` fails when nothing
ran, `doctor` tells the traced command from other processes, `inspect` and `synth` say what they
mean, `bench --help` says what each feed is, and the README says where `index` writes."""
from __future__ import annotations

import re
import shlex
from pathlib import Path

import numpy as np
import pytest

import iofeed
from iofeed.cli.main import main
from iofeed.errors import SourceError

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text(encoding="utf-8")


def _blocks() -> list[tuple[int, str, str]]:
    """(offset, language, body) of every fenced block of the README."""
    return [(m.start(), m[1], m[2]) for m in re.finditer(r"```(\w+)\n(.*?)```", README, re.S)]


def _made(line: str) -> list[str]:
    """What an `iofeed` command line writes: synth's OUT, preprocess's and index's `-o`."""
    argv = shlex.split(line, comments=True)
    if argv[:2] == ["iofeed", "synth"]:
        return [argv[3]]
    return [argv[argv.index("-o") + 1]] if argv[:2] in (["iofeed", "preprocess"], ["iofeed", "index"]) else []


def test_every_data_path_the_readme_reads_is_made_by_a_readme_command_before():
    """train_mix.py read data/extra.iof and data/photos, which nothing in the README made or explained."""
    made: dict[str, int] = {}
    read: list[tuple[int, str]] = []
    for offset, language, body in _blocks():
        if language == "bash":
            for line in body.splitlines():
                for path in _made(line) if line.startswith("iofeed ") else []:
                    made.setdefault(path.rstrip("/"), offset)
                read += [(offset, m) for m in re.findall(r"--mix (data/[\w.]+)=", line)]
        if language == "python":
            read += [(offset, m.rstrip("/")) for m in re.findall(r"[\"'](data/[\w./]+)[\"']", body)]
    assert read, "the README's snippets read data/..."
    missing = [(path, "never made" if path not in made else "made later")
               for offset, path in read if made.get(path, len(README)) > offset]
    assert missing == [], missing


def test_the_readme_says_index_writes_its_indexes_into_the_output_folder(tmp_path):
    """README said `index` writes `.idx` files "beside the shards"; they go into `-o`."""
    from helpers.sources import write_webdataset

    write_webdataset(tmp_path / "wds", shards=2, per_shard=3)
    assert main(["index", str(tmp_path / "wds" / "shard-{000000..000001}.tar"), "-o", str(tmp_path / "ds.iof")]) == 0
    assert sorted(p.suffix for p in (tmp_path / "wds").iterdir()) == [".tar", ".tar"], "nothing written beside them"
    assert len(list((tmp_path / "ds.iof").glob("*.idx"))) == 2
    sentence = README.split("`iofeed index` rewrites nothing:", 1)[1].split(". ", 1)[0]
    assert "beside the shards" not in sentence and "into the `-o` folder" in " ".join(sentence.split()), sentence


def test_a_shard_passed_as_the_source_names_its_dataset(colour_dataset):
    """`iofeed.loader("x.iof/train-000000.tar")` said "pass a folder with one subfolder per class"."""
    shard = colour_dataset / "train-000000.tar"
    assert shard.is_file()
    with pytest.raises(SourceError, match=rf"{re.escape(str(shard))} is a file of the iofeed dataset "
                                          rf"{re.escape(str(colour_dataset))}.*pass the dataset's folder: "
                                          rf"iofeed.loader\('{re.escape(str(colour_dataset))}', split='train'"):
        iofeed.loader(shard, batch_size=4)


def test_a_loose_tar_shard_passed_as_the_source_names_iofeed_index(tmp_path):
    from helpers.sources import write_webdataset

    write_webdataset(tmp_path / "wds", shards=1, per_shard=2)
    shard = tmp_path / "wds" / "shard-000000.tar"
    with pytest.raises(SourceError, match=r"is a tar shard, not a dataset: index it once with `iofeed index"):
        iofeed.loader(shard, batch_size=4)


def test_bench_fails_when_every_feed_failed():
    """`iofeed bench` exited 0 when every feed failed: a script or CI read success."""
    from iofeed.cli.bench.report import all_failed

    def record(*statuses):
        return {"feeds": [{"name": f"feed{i}", "status": s} for i, s in enumerate(statuses)]}

    assert "no feed was measured: feed0, feed1 failed" in all_failed(record("failed", "failed"))
    assert "1 skipped" in all_failed(record("failed", "skipped"))
    assert all_failed(record("ok", "failed")) is None, "what ran is reported: success"
    assert all_failed(record("skipped")) is None, "a feed this machine cannot run is not a failure"


@pytest.mark.torch
@pytest.mark.matplotlib
def test_the_bench_command_exits_non_zero_when_its_only_feed_failed(colour_tree, tmp_path, capsys):
    code = main(["bench", str(colour_tree), "--feeds", "iofeed-folder", "--batch-size", "1000", "--seconds", "0.2",
                 "--rounds", "1", "--warmup", "0", "--workers", "1", "--json", str(tmp_path / "b.json")])
    err = capsys.readouterr().err
    assert code == 1 and "no feed was measured: iofeed-folder failed" in err, err


def test_bench_help_says_what_each_feed_is_and_every_option_has_help(capsys):
    from iofeed.cli.bench.feeds import CATALOGUE, FEEDS

    with pytest.raises(SystemExit):
        main(["bench", "--help"])
    text = capsys.readouterr().out
    flat = " ".join(text.split())
    for name in CATALOGUE:
        assert f"{name} {' '.join(FEEDS.caps(name).about.split())}" in flat, name
    options = text.split("options:", 1)[1].split("\n\n", 1)[0]
    for flag in re.findall(r"^  (--[\w-]+)", options, re.M):
        entry = options.split(flag, 1)[1].split("\n  --", 1)[0]
        assert re.search(r"[a-z]{3,}", entry.replace(flag.lstrip("-").upper().replace("-", "_"), "")), flag


def test_inspect_shows_every_class_of_a_small_dataset_and_its_size_in_a_unit_that_shows_it(image_tree, tmp_path,
                                                                                            capsys):
    """`inspect` printed "classes 3 (cat, dog, fox, ...)" and "0.0 MiB"."""
    from iofeed.format.manifest import Manifest
    from iofeed.prepare.run import preprocess

    out = tmp_path / "small.iof"
    preprocess(image_tree[0], out, progress=False, workers=1)
    assert main(["inspect", str(out)]) == 0
    text = capsys.readouterr().out
    classes = Manifest.read(out).classes
    assert len(classes) == 3 and f"classes       3 ({', '.join(classes)})\n" in text, text
    assert "0.0 MiB" not in text and re.search(r"samples in 1 shard, \d+\.\d KiB", text), text


def test_byte_sizes_take_the_unit_that_shows_them():
    from iofeed.cli.printing import byte_size, names

    assert [byte_size(n) for n in (830, 12_700, 1_150_000, 5.42 * 2**30)] == [
        "830 bytes", "12.4 KiB", "1.1 MiB", "5.42 GiB"]
    assert names(["a", "b", "c"]) == "a, b, c" and names(["a", "b", "c", "d"]) == "a, b, c, ..."


def test_synth_names_its_command_line_flag(tmp_path, capsys):
    """`iofeed synth` said "pass overwrite=True" where the flag is `--overwrite`."""
    argv = ["synth", "caltech256", str(tmp_path / "c256"), "--per-class", "1", "--workers", "1"]
    assert main(argv) == 0
    capsys.readouterr()
    assert main(argv) == 1
    err = capsys.readouterr().err
    assert "pass --overwrite" in err and err.count("\n") == 1, err


def _trace(cores_busy: float, command: float, samples: int = 30):
    from iofeed.cli.doctor.trace import Trace

    n = samples
    return Trace(t=np.arange(n) * 0.1, gpu_util=np.zeros((0, n)), gpu_mem=np.zeros((0, n)), gpu_mem_total=np.zeros(0),
                 cpu=np.full((2, n), cores_busy), iowait=np.zeros(n), rss=np.full(n, 1e8),
                 trainer_cpu=np.full(n, command * 0.6), loader_cpu=np.vstack([np.full(n, command * 0.4),
                                                                              np.full(n, np.nan)]))


def test_doctor_says_when_other_processes_take_the_cpu():
    """Both cores busy, the traced job using 60% of one: doctor said nothing, and its PNG showed
    both cores busy with nothing telling the job from the others."""
    from iofeed.cli.doctor.others import others_finding

    finding = others_finding(_trace(cores_busy=100.0, command=60.0))
    assert finding is not None and finding.code == "other-processes"
    assert finding.title == "Other processes took 70% of the CPU while the command ran"
    assert "the command's own processes (training and loaders) 30%, other processes 70%" in finding.evidence[0]
    assert others_finding(_trace(cores_busy=35.0, command=60.0)) is None, "a quiet machine: nothing to say"


@pytest.mark.matplotlib
def test_the_doctor_timeline_draws_the_traced_command_apart_from_other_processes():
    from iofeed.cli.doctor.plot import draw_timeline
    from iofeed.cli.doctor.trace import Recording

    figure = draw_timeline(Recording(["python", "train.py"], 0, 3.0, False, _trace(100.0, 60.0)), [])
    lines = {line.get_label(): line.get_ydata() for axes in figure.axes for line in axes.get_lines()}
    np.testing.assert_allclose(lines["of it the traced command (training + loaders)"], 30.0)
    np.testing.assert_allclose(lines["of it other processes"], 70.0)


def test_a_relative_source_reads_the_same_after_the_folder_changes(colour_dataset, tmp_path, monkeypatch):
    """tf.md's `iofeed.loader("flowers.iof", ...)`, run as written: the workers opened the shards
    relative to their own folder, and every sample was unreadable once the script (or a notebook's
    `%cd`) had moved on."""
    monkeypatch.chdir(colour_dataset.parent)
    loader = iofeed.loader(colour_dataset.name, batch_size=4, image_size=32, workers=1)
    monkeypatch.chdir(tmp_path)
    with loader:
        assert sum(len(labels) for _, labels in loader) == len(loader) * 4
