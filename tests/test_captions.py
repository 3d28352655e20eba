"""Image-text shards as img2dataset writes them (`helpers/adversarial_captions.py`): each image's
pixels encode its sample number and its caption spells the same number, so a caption that arrives
with another sample's image, is lost, doubled or altered shows end to end. `--target text` keeps
captions exactly; `Output(target="text")` delivers them as strings or, with a tokenizer run in the
workers, as padded ids; order, seeds, resume and skips as for images."""
from __future__ import annotations

import json
import tarfile
from collections import Counter
from pathlib import Path

import numpy as np
import pytest

import iofeed
from helpers.adversarial_captions import caption_of, captions
from helpers.pixelcode import decode
from helpers.tokenizers import fails_on_seven, not_ids, text_of, utf8_ids, with_draw
from iofeed.augment.batch_key import BatchKey
from iofeed.augment.tokenizer import SampleTokenizer
from iofeed.errors import OptionError, SourceError, WorkerError
from iofeed.format.targets import check_targets
from iofeed.prepare.run import preprocess

EVAL = iofeed.Recipe(train=False, crop_fraction=1.0)


@pytest.fixture(scope="module")
def dataset(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("captions")
    source = captions(root, "missing_caption")  # sample 4's caption only in its json, sample 9 without one
    out = root / "ds.iof"
    preprocess(source.spec, out, workers=1, progress=False, val_fraction=0, target="text")
    return out


def _strings(dataset: Path, **kw) -> list[tuple[int, str]]:
    """(sample number from the pixels, caption) of every delivered image, in order."""
    got = []
    kw = {"batch_size": 5, "image_size": 32, "augment": EVAL, "workers": 1, "drop_last": False, **kw}
    with iofeed.loader(dataset, output=iofeed.Output(target="text"), **kw) as ld:
        for images, texts in ld:
            assert isinstance(texts, list) and len(texts) == len(images)
            got += [(decode(image)[1], text) for image, text in zip(images, texts)]
    return got


def test_preprocess_keeps_each_caption_exactly_in_its_shard_and_side_file(dataset: Path) -> None:
    manifest = json.loads((dataset / "iofeed.json").read_text())
    entry = manifest["targets"]
    assert entry["kind"] == "text" and entry["captions"] == {"version": 1, "files": {"train": "train-captions.npz"}}
    assert manifest["classes"] == []
    check_targets(entry)
    with tarfile.open(dataset / "train-000000.tar") as tar:
        members = {m.name: tar.extractfile(m).read() for m in tar if m.isfile()}
    texts = {k.rsplit(".", 1)[0]: v for k, v in members.items() if k.endswith(".txt")}
    extras = [json.loads(v) for k, v in members.items() if k.endswith(".json")]
    written = {e["key"]: e for e in extras}
    assert len(texts) == 23
    for text in texts.values():  # the member holds the caption byte for byte (the newline and non-ASCII too)
        number = int(text.decode("utf-8").split()[1].rstrip(":"))
        assert text == caption_of(number).encode("utf-8")
    assert {e["url"] for e in written.values()} >= {"https://example.com/4.jpg"}


def test_captions_arrive_with_their_own_images_whatever_the_worker_count(dataset: Path) -> None:
    one = _strings(dataset, workers=1, shuffle=True, seed=5)
    two = _strings(dataset, workers=2, shuffle=True, seed=5)
    assert one == two
    assert sorted(n for n, _ in one) == [n for n in range(24) if n != 9]
    assert all(text == caption_of(n) for n, text in one)
    assert [n for n, _ in one] != sorted(n for n, _ in one)  # shuffled, so the match is no accident of order


def test_caption_rejections_name_the_reason(tmp_path: Path) -> None:
    for damage, reason in (("other_encoding", "caption not UTF-8 (its txt member: byte 0xe9 at 17; write captions "
                                              "as UTF-8)"),
                           ("empty_caption", "empty caption (its txt member is blank)"),
                           ("malformed_json", "unreadable json member")):
        source = captions(tmp_path / damage, damage)
        out = tmp_path / damage / "ds.iof"
        summary = preprocess(source.spec, out, workers=1, progress=False, val_fraction=0, target="text")
        rejected = [json.loads(line) for line in (out / "rejected.jsonl").read_text().splitlines()]
        expected = {i.sample for i in source.items if i.expect is None}
        assert summary.written == {"train": 24 - len(expected)}
        assert len(rejected) == len(expected) and all(r["reason"].startswith(reason) for r in rejected), rejected
        delivered = _strings(out)
        assert {n for n, _ in delivered} == set(range(24)) - expected
        assert all(text == caption_of(n) for n, text in delivered)


def test_img2dataset_output_folder_is_read_without_its_stats_and_parquet_files(tmp_path: Path) -> None:
    source = captions(tmp_path, "clean")
    folder = source.shards[0].parent
    assert {p.name for p in folder.iterdir()} >= {"00000_stats.json", "00000.parquet"}
    summary = preprocess(folder, tmp_path / "ds.iof", workers=1, progress=False, val_fraction=0, target="text")
    assert summary.written == {"train": 24} and summary.rejected == {}
    with pytest.raises(SourceError, match=r"holds both Parquet files and tar shards"):  # as classes: ambiguous
        preprocess(folder, tmp_path / "cls.iof", workers=1, progress=False)


def test_target_text_is_refused_where_it_cannot_apply(tmp_path: Path, colour_tree: Path, colour_dataset: Path) -> None:
    with pytest.raises(OptionError, match=r"--target text reads image-text WebDataset shards.*not a folder source"):
        preprocess(colour_tree, tmp_path / "a.iof", workers=1, progress=False, target="text")
    source = captions(tmp_path, "clean")
    with pytest.raises(OptionError, match=r"--label-names .* --target text .*pass one"):
        preprocess(source.spec, tmp_path / "b.iof", workers=1, progress=False, target="text", label_names=True)
    with pytest.raises(OptionError, match=r"--target must be one of class, text, got 'caption'"):
        preprocess(source.spec, tmp_path / "c.iof", workers=1, progress=False, target="caption")
    with pytest.raises(OptionError, match=r"holds no captions for split 'train'.*--target text"):
        iofeed.loader(colour_dataset, batch_size=4, output=iofeed.Output(target="text"))


def test_the_refusal_of_caption_like_labels_names_target_text(tmp_path: Path) -> None:
    source = captions(tmp_path, "clean")
    with pytest.raises(SourceError, match=r"look like captions.*--target text"):
        preprocess(source.spec, tmp_path / "a.iof", workers=1, progress=False)


def test_a_tokenizer_runs_in_the_workers_and_its_ids_give_each_caption_back(dataset: Path) -> None:
    import torch

    seen = []
    with iofeed.loader(dataset, batch_size=5, image_size=32, augment=EVAL, workers=2, framework="torch",
                       drop_last=False, output=iofeed.Output(target="text", tokenizer=utf8_ids, pixels="uint8")) as ld:
        for images, ids, lengths in ld:
            assert ids.dtype == lengths.dtype == torch.int64 and ids.shape[0] == len(images)
            assert int(lengths.max()) == ids.shape[1] and not ids[torch.arange(ids.shape[1]) >= lengths[:, None]].any()
            for image, row, length in zip(images.permute(0, 2, 3, 1).numpy(), ids.numpy(), lengths):
                number = decode(image)[1]
                seen.append(number)
                assert text_of(row, int(length)) == caption_of(number)
    assert sorted(seen) == [n for n in range(24) if n != 9]


def _draws(dataset: Path, **kw) -> dict[int, int]:
    """{sample number: the tokenizer's seeded draw} over one epoch."""
    out = {}
    kw = {"batch_size": 4, "image_size": 32, "augment": EVAL, "workers": 1, "shuffle": True, "seed": 3,
          "drop_last": False, **kw}
    with iofeed.loader(dataset, output=iofeed.Output(target="text", tokenizer=with_draw), **kw) as ld:
        for images, ids, lengths in ld:
            for image, row, length in zip(images, ids, lengths):
                number = decode(image)[1]
                assert text_of(row, int(length) - 1) == caption_of(number)
                out[number] = int(row[int(length) - 1])
    return out


def test_the_tokenizer_is_seeded_per_sample_like_a_transform(dataset: Path) -> None:
    one, two = _draws(dataset, workers=1), _draws(dataset, workers=2)
    assert one == two  # the seeds follow (seed, epoch, rank, batch, place), not the worker
    assert len(set(one.values())) == len(one)  # each sample its own stream
    assert _draws(dataset, seed=4) != one
    # the first batch's first sample drew from the seeds of (key, place 0), as `transform=` would
    with iofeed.loader(dataset, batch_size=4, image_size=32, augment=EVAL, workers=1, shuffle=True, seed=3,
                       output=iofeed.Output(target="text", tokenizer=with_draw)) as ld:
        images, ids, lengths = next(iter(ld))
        first = int(ld.last_indices[0])
    text = text_of(ids[0], int(lengths[0]) - 1)
    assert decode(images[0])[1] == int(text.split()[1].rstrip(":"))
    expected = SampleTokenizer(with_draw)(text, BatchKey(3, 0, 0, 0), 0)
    assert int(ids[0, int(lengths[0]) - 1]) == int(expected[-1]) and first >= 0


@pytest.mark.parametrize("resume_kw", [{}, {"batch_size": 3, "workers": 2}], ids=["exact", "elastic"])
def test_a_resumed_epoch_delivers_the_rest_with_their_captions(dataset: Path, resume_kw: dict) -> None:
    kw = {"batch_size": 4, "image_size": 32, "augment": EVAL, "workers": 1, "shuffle": True, "seed": 7,
          "drop_last": False}
    output = iofeed.Output(target="text")
    with iofeed.loader(dataset, output=output, **kw) as ld:
        whole = [(decode(im)[1], t) for images, texts in ld for im, t in zip(images, texts)]
    with iofeed.loader(dataset, output=output, **kw) as ld:
        it = iter(ld)
        head = [(decode(im)[1], t) for images, texts in (next(it), next(it)) for im, t in zip(images, texts)]
        state = ld.state_dict()
    with iofeed.loader(dataset, output=output, **{**kw, **resume_kw}) as ld:
        ld.load_state_dict(state)
        tail = [(decode(im)[1], t) for images, texts in ld for im, t in zip(images, texts)]
    assert all(text == caption_of(n) for n, text in head + tail)
    if not resume_kw:
        assert head + tail == whole
    assert sorted(head + tail) == sorted(whole)


def test_a_sample_the_tokenizer_fails_on_is_skipped_counted_and_replaced(dataset: Path) -> None:
    with iofeed.loader(dataset, batch_size=4, image_size=32, augment=EVAL, workers=2, drop_last=False,
                       skips=iofeed.Skips(on_error="skip", max_skipped=0.5),
                       output=iofeed.Output(target="text", tokenizer=fails_on_seven)) as ld:
        got = [(decode(im)[1], text_of(row, int(n))) for images, ids, lengths in ld
               for im, row, n in zip(images, ids, lengths)]
        skipped = Counter(ld.stats.skipped)
    assert all(text == caption_of(number) for number, text in got)
    failed = {7, 17}
    assert sum(skipped.values()) == len(failed) and failed.isdisjoint(n for n, _ in got)
    assert len(got) == 23  # their places taken by spares (the epoch's later samples, the next epoch's first)
    with pytest.raises(iofeed.IofeedError, match=r"tokenizer helpers\.tokenizers\.fails_on_seven raised ValueError"):
        with iofeed.loader(dataset, batch_size=4, image_size=32, augment=EVAL, workers=1,
                           output=iofeed.Output(target="text", tokenizer=fails_on_seven)) as ld:
            list(ld)


def test_a_tokenizer_that_returns_no_ids_is_named(dataset: Path) -> None:
    with pytest.raises(WorkerError, match=r"tokenizer helpers\.tokenizers\.not_ids returned str.*token ids"):
        with iofeed.loader(dataset, batch_size=4, image_size=32, workers=1,
                           output=iofeed.Output(target="text", tokenizer=not_ids)) as ld:
            list(ld)


def test_what_cannot_carry_captions_is_refused_in_one_line(dataset: Path) -> None:
    for engine in ("dali", "nvjpeg"):
        with pytest.raises(OptionError, match=rf"Output.tokenizer runs in worker processes, not in engine='{engine}'"):
            iofeed.loader(dataset, batch_size=4, engine=engine, output=iofeed.Output(target="text", tokenizer=utf8_ids))
    for framework in ("tf", "keras"):
        with pytest.raises(OptionError, match=rf"Output.target='text' is not built for framework='{framework}'"):
            iofeed.loader(dataset, batch_size=4, framework=framework, output=iofeed.Output(target="text"))
    with pytest.raises(OptionError, match=r"Output.tokenizer tokenizes captions: pass Output\(target='text'"):
        iofeed.Output(tokenizer=utf8_ids)
    with pytest.raises(OptionError, match=r"Output.tokenizer=<lambda> cannot reach the worker processes"):
        iofeed.Output(target="text", tokenizer=lambda text: [1])
    with pytest.raises(OptionError, match=r"Output.tokenizer=3 is not callable"):
        iofeed.Output(target="text", tokenizer=3)


def test_numpy_and_jax_get_numpy_ids_and_extras_come_last(dataset: Path) -> None:
    pytest.importorskip("jax")
    for framework in ("numpy", "jax"):
        with iofeed.loader(dataset, batch_size=4, image_size=32, workers=1, augment=EVAL, framework=framework,
                           output=iofeed.Output(target="text", tokenizer=utf8_ids, extras=True)) as ld:
            images, ids, lengths, extras = next(iter(ld))
            assert isinstance(ids, np.ndarray) and ids.dtype == np.int64 and lengths.dtype == np.int64
            for row, n, extra in zip(ids, lengths, extras):
                text = text_of(row, int(n))
                assert extra["caption"] == text or extra["key"] == "000000004"  # 4's txt left out: its json's
    with iofeed.loader(dataset, batch_size=4, image_size=32, workers=1, augment=EVAL, framework="jax",
                       output=iofeed.Output(target="text")) as ld:
        images, texts = next(iter(ld))
        assert type(images).__module__.startswith("jax") and all(isinstance(t, str) for t in texts)


def test_the_side_file_layout_is_versioned() -> None:
    entry = {"kind": "text", "extras": False, "files": {}, "captions": {"version": 2, "files": {}}}
    with pytest.raises(ValueError, match=r"targets.captions.version.*upgrade iofeed"):
        check_targets(entry)
    with pytest.raises(ValueError, match=r'"targets.captions" must be an object'):
        check_targets({"kind": "text", "extras": False, "files": {}})


@pytest.mark.parametrize("engine", [pytest.param("dali", marks=pytest.mark.dali),
                                    pytest.param("nvjpeg", marks=pytest.mark.torchvision)])
def test_every_engine_delivers_the_same_captions_as_strings(dataset: Path, engine: str) -> None:
    """Strings are looked up in the main process by sample index: an engine that runs no Python per
    sample delivers them too, in its own batches' order."""
    kw = {"shuffle": True, "seed": 2, "batch_size": 4}
    theirs, ours = _strings(dataset, engine=engine, **kw), _strings(dataset, engine="workers", **kw)
    assert [t for _, t in theirs] == [t for _, t in ours]
    assert all(text == caption_of(n) for n, text in theirs)


def test_an_exactly_resumed_epoch_repeats_the_tokenizers_draws(dataset: Path) -> None:
    whole = _draws(dataset)
    kw = {"batch_size": 4, "image_size": 32, "augment": EVAL, "workers": 1, "shuffle": True, "seed": 3,
          "drop_last": False, "output": iofeed.Output(target="text", tokenizer=with_draw)}
    with iofeed.loader(dataset, **kw) as ld:
        next(iter(ld))
        state = ld.state_dict()
    with iofeed.loader(dataset, **{**kw, "workers": 2}) as ld:
        ld.load_state_dict(state)
        tail = {decode(image)[1]: int(row[int(n) - 1]) for images, ids, lengths in ld
                for image, row, n in zip(images, ids, lengths)}
    assert len(tail) == len(whole) - 4 and all(whole[number] == draw for number, draw in tail.items())
