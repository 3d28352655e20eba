"""The adversarial sweep of preprocess / index / loader surfaces (docs/sweeps.md): each test is one
attempt that found a sample lost, relabelled or a misleading error, with pixels encoding labels."""
from __future__ import annotations

import json
import os
import unicodedata
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from helpers.images import CLASS_COLOURS, jpeg_bytes, label_from_pixels, make_colour_tree
from helpers.sources import read_dataset
from iofeed.cli.main import main
from iofeed.format.manifest import Manifest
from iofeed.prepare.run import preprocess


def _stored(out: Path) -> dict[str, tuple[int, int]]:
    """{source name: (stored label, label its pixels encode)} of every sample of a dataset."""
    return {name: (classes[0], label_from_pixels(image)) for name, (image, classes, _) in read_dataset(out).items()}


def _rejected(out: Path) -> dict[str, str]:
    lines = (out / "rejected.jsonl").read_text().splitlines()
    return {row["path"]: row["reason"] for row in map(json.loads, lines)}


def test_a_symlinked_class_folder_at_the_top_is_a_class_not_dropped(tmp_path):
    """ImageNet-style trees built from links: a class folder linked in from elsewhere was rejected
    whole ("symlinked folder"), so the dataset silently had a class fewer."""
    elsewhere = make_colour_tree(tmp_path / "elsewhere", per_class=3)
    src = tmp_path / "src"
    src.mkdir()
    for folder in sorted(elsewhere.iterdir())[:3]:
        os.rename(folder, src / folder.name)
    os.symlink(elsewhere / "004.colour3", src / "004.colour3")
    summary = preprocess(src, tmp_path / "out.iof", val_fraction=0, progress=False, workers=1)
    stored = _stored(summary.out)
    assert Manifest.read(summary.out).classes == ["colour0", "colour1", "colour2", "colour3"]
    assert len(stored) == 12 and all(label == coded for label, coded in stored.values())
    assert sum(name.startswith("004.colour3/") for name in stored) == 3


def test_doctor_checks_the_classes_and_files_preprocess_reads_through_a_class_link(tmp_path):
    """`iofeed doctor`'s own walk skipped a class folder linked in at the top, which preprocess
    reads as a class: a quarter of the data was neither counted nor checked. It now samples the
    files of the preprocess scan (its links, and nothing a link that repeats the source reaches)."""
    from iofeed.cli.doctor.data import check_data

    elsewhere = make_colour_tree(tmp_path / "elsewhere", per_class=3)
    (elsewhere / "004.colour3" / "notes.jpg").write_bytes(b"not an image\n")
    src = tmp_path / "src"
    src.mkdir()
    for folder in sorted(elsewhere.iterdir())[:3]:
        os.rename(folder, src / folder.name)
    os.symlink(elsewhere / "004.colour3", src / "004.colour3")
    os.symlink(src / "001.colour0", src / "005.alias")  # preprocess rejects it: no second label
    check = check_data(src, decode_sample=0)
    summary = preprocess(src, tmp_path / "out.iof", val_fraction=0, progress=False, workers=1)
    assert summary.rejected == {"not an image": 1, "symlinked folder": 1}
    assert check.total == check.sampled == len(_stored(summary.out)) + 1 == 13
    assert check.formats == {"jpeg": 12, "not an image": 1}
    assert check.bad == ["004.colour3/notes.jpg: not an image"]


def test_a_symlinked_class_folder_that_would_repeat_images_is_named_not_followed(tmp_path):
    """A link back into the source (or at it) would give another class's images a second label, or
    loop; two links to one folder would store its images twice: each is rejected with the reason."""
    src = make_colour_tree(tmp_path / "src", per_class=2)
    outside = make_colour_tree(tmp_path / "outside", per_class=2)
    os.symlink(src / "002.colour1", src / "005.alias")
    os.symlink(src, src / "006.loop")
    os.symlink(outside / "003.colour2", src / "007.linked")
    os.symlink(outside / "003.colour2", src / "008.again")
    summary = preprocess(src, tmp_path / "out.iof", val_fraction=0, progress=False, workers=1)
    stored, rejected = _stored(summary.out), _rejected(summary.out)
    assert "inside the source" in rejected["005.alias"]
    assert "a folder holding it" in rejected["006.loop"]
    assert "the same folder as class 007.linked" in rejected["008.again"]
    names = Manifest.read(summary.out).classes
    assert names == ["colour0", "colour1", "colour2", "colour3", "linked"]
    assert len(stored) == 10
    assert all(names[label] == "linked" or label == coded for label, coded in stored.values())




def test_a_broken_class_folder_link_is_named_as_one(tmp_path):
    """A top-level class link whose target is gone (a disk not mounted) was "not in a class folder"."""
    src = make_colour_tree(tmp_path / "src", per_class=2)
    os.symlink(tmp_path / "unmounted" / "cats", src / "005.cats")
    summary = preprocess(src, tmp_path / "out.iof", val_fraction=0, progress=False, workers=1)
    assert _rejected(summary.out) == {"005.cats": f"broken symlink (to {tmp_path}/unmounted/cats, which is missing)"}
    assert summary.rejected == {"broken symlink": 1}


def test_an_output_inside_a_linked_class_folder_is_refused_before_writing(tmp_path, capsys):
    """Once linked class folders are read, an -o inside one lies inside the source: the dataset
    (and its lock) landed among that class's images and the next run read its files as samples."""
    elsewhere = make_colour_tree(tmp_path / "elsewhere", per_class=2)
    src = tmp_path / "src"
    src.mkdir()
    os.rename(elsewhere / "001.colour0", src / "001.colour0")
    os.symlink(elsewhere / "002.colour1", src / "002.colour1")
    out = elsewhere / "002.colour1" / "out.iof"
    before = sorted(p.name for p in (elsewhere / "002.colour1").iterdir())
    assert main(["preprocess", str(src), "-o", str(out)]) != 0
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "overlaps the source folder" in err[0] and "002.colour1 (a link to" in err[0]
    assert sorted(p.name for p in (elsewhere / "002.colour1").iterdir()) == before



def test_class_folders_differing_only_in_unicode_form_are_refused_naming_both(tmp_path, capsys):
    """A macOS copy (NFD 'café') beside the NFC folder made two classes that print the same name,
    each with half the class's images."""
    src = make_colour_tree(tmp_path / "src", per_class=2)
    os.rename(src / "001.colour0", src / unicodedata.normalize("NFC", "café"))
    os.rename(src / "002.colour1", src / unicodedata.normalize("NFD", "café"))
    assert main(["preprocess", str(src), "-o", str(tmp_path / "out.iof")]) != 0
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "differ only in Unicode normalisation" in err[0] and "caf\\xe9" in err[0]
    assert not (tmp_path / "out.iof").exists()



def test_numbered_class_folders_that_share_a_name_are_refused_naming_both(tmp_path, capsys):
    """`001.cat` and `002.cat` (a class split in two, or copied) both became the class "cat": two
    classes printed with one name, so `classes.index("cat")` found half the images."""
    src = make_colour_tree(tmp_path / "src", per_class=2)
    os.rename(src / "001.colour0", src / "001.cat")
    os.rename(src / "002.colour1", src / "002.cat")
    assert main(["preprocess", str(src), "-o", str(tmp_path / "out.iof")]) != 0
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "'001.cat' and '002.cat'" in err[0] and "would both be the class 'cat'" in err[0]


def test_class_folders_differing_in_case_stay_two_classes(tmp_path):
    """Case is kept (EMNIST-like trees have `A` and `a`): each folder its own class, every label right."""
    src = make_colour_tree(tmp_path / "src", per_class=2)
    os.rename(src / "001.colour0", src / "A")
    os.rename(src / "002.colour1", src / "a")
    summary = preprocess(src, tmp_path / "out.iof", val_fraction=0, progress=False, workers=1)
    names = Manifest.read(summary.out).classes
    assert names == ["colour2", "colour3", "A", "a"]
    colour = {"A": 0, "a": 1, "colour2": 2, "colour3": 3}
    stored = _stored(summary.out)
    assert len(stored) == 8 and all(colour[names[label]] == coded for label, coded in stored.values())



def test_a_class_folder_beside_256_object_categories_is_a_rejection_not_lost(tmp_path):
    """With `src/256_ObjectCategories/` present only its class folders are read: a class folder
    added beside it (and its images) vanished with 0 rejected."""
    src = tmp_path / "caltech"
    make_colour_tree(src / "256_ObjectCategories", per_class=2)
    (src / "258.added").mkdir()
    (src / "258.added" / "0000.jpg").write_bytes(_coded(0))
    (src / "stray.jpg").write_bytes(_coded(1))
    (src / "256_ObjectCategories.tar").write_bytes(b"not an image")
    summary = preprocess(src, tmp_path / "out.iof", val_fraction=0, progress=False, workers=1)
    assert _rejected(summary.out) == {
        "../258.added": "beside 256_ObjectCategories (not read: only the class folders in it are)",
        "../stray.jpg": "beside 256_ObjectCategories (not read: only the class folders in it are)"}
    stored = _stored(summary.out)
    assert len(stored) == 8 and all(label == coded for label, coded in stored.values())


def _caption_shards(folder: Path, captions: list[str], with_json: bool = True) -> Path:
    """One shard as img2dataset writes it: jpg + txt caption + json (unless not `with_json`),
    pixels coding the sample's colour."""
    import webdataset as wds

    folder.mkdir(parents=True, exist_ok=True)
    with wds.TarWriter(str(folder / "00000.tar")) as sink:
        for i, caption in enumerate(captions):
            colour = np.full((48, 64, 3), CLASS_COLOURS[i % 4], np.uint8)
            sample = {"__key__": f"{i:09d}", "jpg": jpeg_bytes(Image.fromarray(colour)), "txt": caption}
            sink.write({**sample, "json": {"caption": caption, "key": f"{i:09d}"}} if with_json else sample)
    return folder


CAPTIONS = [f"a photo of thing {i} on a table" for i in range(6)]


@pytest.mark.parametrize("command", ["preprocess", "index"])
def test_caption_shards_without_a_label_column_are_refused_naming_the_fix(tmp_path, command, capsys):
    """img2dataset shards (jpg + txt + json) read with the defaults made each caption a class: 6
    samples gave 6 classes of one sample each, with no word."""
    shards = _caption_shards(tmp_path / "wds", CAPTIONS)
    rc = main([command, str(shards / "00000.tar"), "-o", str(tmp_path / "out.iof")])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc != 0 and len(err) == 1, err
    assert "look like captions" in err[0] and "--label-column json" in err[0] and "00000.tar#000000000" in err[0]
    assert not (tmp_path / "out.iof").exists()



@pytest.mark.parametrize("command", ["preprocess", "index"])
def test_caption_shards_over_http_are_refused_by_url(tmp_path, command, capsys):
    """The same rule for shards read from a URL: the refusal names the sample by its URL."""
    from helpers.storage import CountingServer

    _caption_shards(tmp_path / "wds", CAPTIONS)
    server = CountingServer(tmp_path / "wds")
    try:
        url = f"{server.url}/00000.tar"
        assert main([command, url, "-o", str(tmp_path / "out.iof")]) != 0
    finally:
        server.close()
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "look like captions" in err[0] and f"{url}#000000000" in err[0]



def test_caption_shards_with_a_class_in_their_json_load_by_its_key(tmp_path):
    """The refusal's `--label-column KEY` takes the class from each json, never from the caption."""
    shards = _caption_shards(tmp_path / "wds", CAPTIONS)
    out = tmp_path / "out.iof"
    assert main(["preprocess", str(shards), "-o", str(out), "--val-fraction", "0", "--label-column", "key"]) == 0
    classes = Manifest.read(out).classes
    assert classes == [str(i) for i in range(6)]  # "000000003" is a number, so class index 3 (docs: Labels)
    for name, (image, labels, _) in read_dataset(out).items():
        i = int(name.rsplit("#", 1)[1])
        assert classes[labels[0]] == str(i) and label_from_pixels(image) == i % 4


@pytest.mark.parametrize("option", [["--label-column", "json"], ["--label-names"]])
def test_caption_shards_load_as_the_user_says(tmp_path, option):
    """Either fix the refusal names works: captions as extras (no classes), or each text a class."""
    shards = _caption_shards(tmp_path / "wds", CAPTIONS)
    out = tmp_path / "out.iof"
    assert main(["preprocess", str(shards), "-o", str(out), "--val-fraction", "0", *option]) == 0
    stored = read_dataset(out)
    assert len(stored) == 6
    classes = Manifest.read(out).classes
    for name, (image, labels, extra) in stored.items():
        i = int(name.rsplit("#", 1)[1])
        assert label_from_pixels(image) == i % 4
        if option[0] == "--label-names":
            assert [classes[c] for c in labels] == [CAPTIONS[i]]
        else:
            assert labels == [] and extra["caption"] == CAPTIONS[i]


def test_txt_class_names_shared_by_samples_are_classes(tmp_path):
    """The caption rule leaves class names in txt members alone: most samples share their text."""
    names = ["cat", "dog", "cat", "dog", "cat", "bird"]
    shards = _caption_shards(tmp_path / "wds", names)
    assert main(["index", str(shards / "00000.tar"), "-o", str(tmp_path / "indexed.iof")]) == 0
    assert Manifest.read(tmp_path / "indexed.iof").classes == ["bird", "cat", "dog"]
    out = tmp_path / "out.iof"
    assert main(["preprocess", str(shards), "-o", str(out), "--val-fraction", "0"]) == 0
    classes = Manifest.read(out).classes
    for name, (image, labels, _) in read_dataset(out).items():
        i = int(name.rsplit("#", 1)[1])
        assert classes[labels[0]] == names[i] and label_from_pixels(image) == i % 4


SHORT_CAPTIONS = ["Red Sports Car", "Blue Kite", "Old Barn", "Tiny Teapot", "Wet Dog", "Red Sports Car"]


@pytest.mark.parametrize("command", ["preprocess", "index"])
def test_short_unique_captions_are_named_in_the_summary_with_both_ways(tmp_path, command, capsys):
    """img2dataset shards whose captions are short ("Red Sports Car") pass the caption rule and
    become a class each, as few-shot names would: the summary names the source and says how to
    take the texts as captions or as names; --label-names (the user saying so) silences it."""
    shards = _caption_shards(tmp_path / "wds", SHORT_CAPTIONS)
    split = ["--val-fraction", "0"] if command == "preprocess" else []
    assert main([command, str(shards / "00000.tar"), "-o", str(tmp_path / "a.iof"), *split]) == 0
    out = capsys.readouterr().out
    note = [line for line in out.splitlines() if "have one sample" in line]
    assert len(note) == 1, out
    assert ("4 of 5 classes in" in note[0] and "00000.tar" in note[0] and "'Blue Kite'" in note[0]
            and "--label-column json" in note[0] and "--label-names" in note[0]), note[0]
    assert main([command, str(shards / "00000.tar"), "-o", str(tmp_path / "b.iof"), *split, "--label-names"]) == 0
    assert "have one sample" not in capsys.readouterr().out
    assert main([command, str(shards / "00000.tar"), "-o", str(tmp_path / "c.iof"), *split,
                 "--label-column", "json"]) == 0
    assert "have one sample" not in capsys.readouterr().out and Manifest.read(tmp_path / "c.iof").classes == []


# class names as few-shot, face and ImageNet-named sets write them: 6 of 8 samples a class of their own
SINGLETON_CLASSES = ["n01440764", "golden retriever", "West Highland white terrier", "Black_footed_Albatross",
                     "great white shark, white shark, man-eater, man-eating shark, Carcharodon carcharias",
                     "鲤鱼", "golden retriever", "tench, Tinca tinca"]


@pytest.mark.parametrize("command", ["preprocess", "index"])
def test_txt_class_names_of_one_sample_each_are_classes_not_captions(tmp_path, command, capsys):
    """The caption rule counted texts only: a real txt-labelled set whose classes mostly have one
    sample (6 of 8 here) was refused as captions. Names are told from sentences by their words."""
    shards = _caption_shards(tmp_path / "wds", SINGLETON_CLASSES, with_json=False)
    out = tmp_path / "out.iof"
    split = ["--val-fraction", "0"] if command == "preprocess" else []
    assert main([command, str(shards / "00000.tar"), "-o", str(out), *split]) == 0, capsys.readouterr().err
    classes = Manifest.read(out).classes
    assert sorted(classes) == sorted(set(SINGLETON_CLASSES))
    if command == "preprocess":
        stored = read_dataset(out)
        assert len(stored) == 8
        for name, (image, labels, _) in stored.items():
            i = int(name.rsplit("#", 1)[1])
            assert [classes[c] for c in labels] == [SINGLETON_CLASSES[i]] and label_from_pixels(image) == i % 4


# iNaturalist 2021's class names: the taxonomy joined by underscores, one token 60 to 90 columns wide
INAT_CLASSES = ["00000_Animalia_Annelida_Clitellata_Haplotaxida_Lumbricidae_Lumbricus_terrestris",
                "02913_Plantae_Tracheophyta_Magnoliopsida_Asterales_Asteraceae_Symphyotrichum_novae-angliae",
                "03176_Animalia_Arthropoda_Insecta_Lepidoptera_Nymphalidae_Danaus_plexippus",
                "04410_Animalia_Chordata_Aves_Passeriformes_Turdidae_Turdus_migratorius",
                "05312_Fungi_Basidiomycota_Agaricomycetes_Agaricales_Amanitaceae_Amanita_muscaria",
                "07001_Plantae_Tracheophyta_Pinopsida_Pinales_Pinaceae_Pinus_strobus",
                "04410_Animalia_Chordata_Aves_Passeriformes_Turdidae_Turdus_migratorius",
                "09652_Animalia_Chordata_Mammalia_Carnivora_Canidae_Vulpes_vulpes"]


def test_txt_class_names_of_one_long_token_are_classes_not_captions(tmp_path, capsys):
    """A long name without spaces (iNaturalist's taxonomy path, 6 of 8 samples a class of their own)
    read as a sentence by its width, which stands in for words only where a script has no spaces:
    the set was refused as captions."""
    shards = _caption_shards(tmp_path / "wds", INAT_CLASSES, with_json=False)
    out = tmp_path / "out.iof"
    assert main(["preprocess", str(shards / "00000.tar"), "-o", str(out), "--val-fraction", "0"]) == 0, \
        capsys.readouterr().err
    classes = Manifest.read(out).classes
    assert sorted(classes) == sorted(set(INAT_CLASSES))
    stored = read_dataset(out)
    assert len(stored) == 8
    for name, (image, labels, _) in stored.items():
        i = int(name.rsplit("#", 1)[1])
        assert [classes[c] for c in labels] == [INAT_CLASSES[i]] and label_from_pixels(image) == i % 4


@pytest.mark.parametrize("captions", [
    [f"a dog number {i} on the grass" for i in range(6)],
    [f"一只可爱的小猫坐在红色的沙发上看着窗外的小鸟{i}" for i in range(6)],  # no spaces: told by its width
    [f"red car, parked on a wet street at night {i}" for i in range(6)],
    [f"a tabby cat {i}, asleep on the sofa" for i in range(6)],  # every clause short: told by its articles
], ids=["short", "chinese", "clauses", "short-clauses"])
def test_captions_are_still_refused_by_their_words_or_width(tmp_path, captions, capsys):
    """Sentences stay captions under the rule by words: a short English one, one written without
    spaces, one whose first clause is a name-like pair."""
    shards = _caption_shards(tmp_path / "wds", captions)
    assert main(["preprocess", str(shards), "-o", str(tmp_path / "out.iof")]) != 0
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "look like captions" in err[0] and "6 of 6 samples" in err[0], err


def _tar(path: Path, members: list[tuple[str, bytes]]) -> Path:
    """A ustar shard holding `members` (name, bytes) in that order."""
    import io
    import tarfile

    path.parent.mkdir(parents=True, exist_ok=True)
    with tarfile.open(path, "w", format=tarfile.USTAR_FORMAT) as tar:
        for name, data in members:
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return path


def _coded(c: int) -> bytes:
    return jpeg_bytes(Image.fromarray(np.full((48, 64, 3), CLASS_COLOURS[c], np.uint8)))


def test_index_rejects_an_image_member_without_an_extension_that_verify_would_refuse(tmp_path):
    """A sample whose image is a member named `a` (no extension) was indexed, but its index line
    leaves such a member out: `inspect --verify` then failed the whole dataset, and DALI could not
    read it."""
    shard = _tar(tmp_path / "wds" / "s.tar", [("a", _coded(0)), ("a.cls", b"0"), ("b.jpg", _coded(1)),
                                               ("b.cls", b"1"), ("c.jpg", _coded(2)), ("c.cls", b"2")])
    out = tmp_path / "out.iof"
    assert main(["index", str(shard), "-o", str(out)]) == 0
    assert _rejected(out) == {f"{shard}#a": "image member without an extension (a DALI index cannot hold it)"}
    assert main(["inspect", str(out), "--verify"]) == 0
    import iofeed

    loader = iofeed.loader(str(out), batch_size=1, framework="numpy", augment=False, shuffle="none", workers=1)
    assert [(int(labels[0]), label_from_pixels(images[0])) for images, labels in loader] == [(1, 1), (2, 2)]


def test_a_table_with_two_image_columns_is_refused_until_one_is_named(tmp_path, capsys):
    """A Parquet table with a photo column and a mask column silently took the first (here the
    mask, whose pixels say another class), as WebDataset refuses two image members."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    table = pa.table({"mask": [_coded((c + 1) % 4) for c in range(4)], "photo": [_coded(c) for c in range(4)],
                      "label": [0, 1, 2, 3]})
    pq.write_table(table, tmp_path / "t.parquet")
    assert main(["preprocess", str(tmp_path / "t.parquet"), "-o", str(tmp_path / "no.iof")]) != 0
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "several image columns (mask, photo)" in err[0] and "--image-column" in err[0]
    out = tmp_path / "out.iof"
    assert main(["preprocess", str(tmp_path / "t.parquet"), "-o", str(out), "--image-column", "photo",
                 "--val-fraction", "0"]) == 0
    stored = _stored(out)
    assert len(stored) == 4 and all(label == coded for label, coded in stored.values())


def test_one_path_listed_twice_with_two_labels_is_said_in_the_summary(tmp_path, capsys):
    """A single-label CSV with one conflicting repeated row became a multi-label dataset with no
    word: the default `target="class"` then gave that image its smallest class, not its row's."""
    images = tmp_path / "images"
    images.mkdir()
    for i in range(8):
        (images / f"{i:03d}.jpg").write_bytes(_coded(i % 4))
    names = ["red", "green", "blue", "yellow"]
    rows = "".join(f"{i:03d}.jpg,{names[i % 4]}\n" for i in range(8)) + "000.jpg,green\n"
    (tmp_path / "labels.csv").write_text("path,label\n" + rows)
    out = tmp_path / "out.iof"
    assert main(["preprocess", str(images), "--labels", str(tmp_path / "labels.csv"), "-o", str(out),
                 "--val-fraction", "0"]) == 0
    said = [line for line in capsys.readouterr().out.splitlines() if "multi-label" in line]
    assert said == ['  multi-label   1 sample with several classes (e.g. 000.jpg: green, red): the targets are '
                    'multi_label; load them with output=iofeed.Output(target="multi_hot")']
    import iofeed

    loader = iofeed.loader(str(out), batch_size=8, framework="numpy", augment=False, shuffle="none", workers=1,
                           output=iofeed.Output(target="multi_hot"))
    classes = Manifest.read(out).classes
    for images_, hot in loader:
        for image, row in zip(images_, hot):
            held = {classes[c] for c in np.flatnonzero(row)}
            assert names[label_from_pixels(image)] in held
            assert len(held) == (2 if held == {"green", "red"} else 1)


def test_a_shard_folder_with_a_subfolder_names_its_shards_and_the_fix(tmp_path, capsys):
    """`index DIR` reads a shard folder holding a `logs/` folder; `preprocess DIR` took it for class
    folders and said only "a.tar: not in a class folder". Now the error names the shards and
    `--source webdataset`, which reads every sample with its label."""
    shards = tmp_path / "wds"
    _tar(shards / "a.tar", [m for c in range(4) for m in ((f"k{c}.jpg", _coded(c)), (f"k{c}.cls", str(c).encode()))])
    (shards / "logs").mkdir()
    (shards / "logs" / "run.log").write_text("written by the crawler\n")
    assert main(["preprocess", str(shards), "-o", str(tmp_path / "no.iof")]) != 0
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "tar shards (a.tar)" in err[0] and "--source webdataset" in err[0]
    out = tmp_path / "out.iof"
    assert main(["preprocess", str(shards), "-o", str(out), "--source", "webdataset", "--val-fraction", "0"]) == 0
    stored = _stored(out)
    assert len(stored) == 4 and all(label == coded for label, coded in stored.values())


def test_a_labels_file_reads_images_under_a_linked_folder_and_says_why_not_others(tmp_path):
    """With --labels, images under a folder linked in at the top of SRC were "listed but not found",
    and so was a listed hidden file that is there: now the linked folder is read as the class-folder
    scan reads it, and a file that is there but not read says why."""
    outside = tmp_path / "outside"
    outside.mkdir()
    images = tmp_path / "images"
    (images / "deep").mkdir(parents=True)
    names = ["red", "green", "blue", "yellow"]
    for c in range(4):
        (images / f"{c}.jpg").write_bytes(_coded(c))
        (outside / f"{c}.jpg").write_bytes(_coded(c))
    os.symlink(outside, images / "linked")
    os.symlink(outside, images / "deep" / "again")
    (images / ".hidden.jpg").write_bytes(_coded(0))
    rows = [f"{c}.jpg,{names[c]}" for c in range(4)] + [f"linked/{c}.jpg,{names[c]}" for c in range(4)]
    rows += [".hidden.jpg,red", "deep/again/1.jpg,green"]
    (tmp_path / "labels.csv").write_text("path,label\n" + "\n".join(rows) + "\n")
    out = tmp_path / "out.iof"
    assert main(["preprocess", str(images), "--labels", str(tmp_path / "labels.csv"), "-o", str(out),
                 "--val-fraction", "0"]) == 0
    classes = Manifest.read(out).classes
    stored = {name: (classes[label], coded) for name, (label, coded) in _stored(out).items()}
    assert sorted(stored) == sorted([f"{c}.jpg" for c in range(4)] + [f"linked/{c}.jpg" for c in range(4)])
    assert all(name == names[coded] for name, coded in stored.values())
    reasons = _rejected(out)
    assert reasons[".hidden.jpg"].endswith("but hidden (a name starting with '.': rename it)")
    assert "under a symlinked folder that is not followed" in reasons["deep/again/1.jpg"]


def test_the_same_image_under_two_samples_is_reported_with_its_classes_and_splits(tmp_path, capsys):
    """An image copied into a second class folder was kept under both labels with no word, so a
    copy could land in val while its twin trained."""
    src = make_colour_tree(tmp_path / "src", per_class=6)
    (src / "002.colour1" / "copy.jpg").write_bytes((src / "001.colour0" / "0003.jpg").read_bytes())
    (src / "001.colour0" / "again.jpg").write_bytes((src / "001.colour0" / "0004.jpg").read_bytes())
    out = tmp_path / "out.iof"
    assert main(["preprocess", str(src), "-o", str(out), "--val-fraction", "0"]) == 0
    said = [line for line in capsys.readouterr().out.splitlines() if line.startswith("  duplicates")]
    assert said == ["  duplicates    2 images with the same bytes as another sample (e.g. 001.colour0/0003.jpg = "
                    "002.colour1/copy.jpg): 1 with other classes, 0 in another split; all kept, remove the copies "
                    "you do not want"]
    stored = _stored(out)
    assert len(stored) == 26 and stored["002.colour1/copy.jpg"] == (1, 0)


def test_find_duplicates_counts_copies_across_splits_and_classes():
    from iofeed.prepare.duplicates import find_duplicates

    found = find_duplicates([("d1", "a.jpg", "train", (0,)), ("d1", "b.jpg", "val", (0,)),
                             ("d1", "c.jpg", "train", (1,)), ("d2", "d.jpg", "val", (2,))])
    assert (found.extra_copies, found.across_splits, found.other_classes, found.example) == (2, 1, 1, "a.jpg = b.jpg")
    assert find_duplicates([("d1", "a.jpg", "train", (0,))]).line() == ""


def test_overwrite_never_deletes_a_labels_file_kept_inside_the_output(tmp_path, capsys):
    """`--labels out.iof/labels.csv -o out.iof --overwrite` replaced OUT and deleted the user's
    labels file with it (rc 0)."""
    images = tmp_path / "images"
    images.mkdir()
    for c in range(4):
        (images / f"{c}.jpg").write_bytes(_coded(c))
    rows = "path,label\n" + "".join(f"{c}.jpg,{c}\n" for c in range(4))
    (tmp_path / "labels.csv").write_text(rows)
    out = tmp_path / "out.iof"
    assert main(["preprocess", str(images), "--labels", str(tmp_path / "labels.csv"), "-o", str(out)]) == 0
    kept = out / "labels.csv"
    kept.write_text(rows)
    capsys.readouterr()
    assert main(["preprocess", str(images), "--labels", str(kept), "-o", str(out), "--overwrite"]) != 0
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--labels" in err[0] and "lies inside the output" in err[0]
    assert kept.read_text() == rows


def test_index_overwrite_never_deletes_shards_kept_inside_the_output(tmp_path, capsys):
    """`iofeed index out.iof/s.tar -o out.iof --overwrite` deleted the very shards it was indexing."""
    out = tmp_path / "out.iof"
    first = _tar(tmp_path / "s.tar", [("a.jpg", _coded(0)), ("a.cls", b"0"), ("b.jpg", _coded(1)), ("b.cls", b"1")])
    assert main(["index", str(first), "-o", str(out)]) == 0
    inside = out / "s.tar"
    inside.write_bytes(first.read_bytes())
    capsys.readouterr()
    assert main(["index", str(inside), "-o", str(out), "--overwrite"]) != 0
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "shard" in err[0] and "lies inside the output" in err[0]
    assert inside.read_bytes() == first.read_bytes()


def test_overwrite_never_deletes_a_file_the_user_put_in_the_dataset(tmp_path, capsys):
    """`--overwrite` replaced a dataset folder and the notes the user kept in it went with it."""
    src = make_colour_tree(tmp_path / "src", per_class=2)
    out = tmp_path / "out.iof"
    assert main(["preprocess", str(src), "-o", str(out)]) == 0
    (out / "NOTES.md").write_text("how this dataset was cleaned")
    capsys.readouterr()
    assert main(["preprocess", str(src), "-o", str(out), "--overwrite"]) != 0
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "holds NOTES.md, which iofeed did not write" in err[0]
    assert (out / "NOTES.md").read_text() == "how this dataset was cleaned"
    (out / "NOTES.md").unlink()
    assert main(["preprocess", str(src), "-o", str(out), "--overwrite"]) == 0
    indexed = tmp_path / "indexed.iof"
    shard = next(out.glob("train-*.tar"))
    assert main(["index", str(shard), "-o", str(indexed)]) == 0
    assert main(["index", str(shard), "-o", str(indexed), "--overwrite"]) == 0


@pytest.mark.parametrize("command", ["preprocess", "index"])
def test_label_members_written_with_a_byte_order_mark_keep_their_meaning(tmp_path, command):
    """`cls` members written by a Windows tool (UTF-8 with a BOM) became the names "\\ufeff0" ..
    "\\ufeff11", sorted as text: cls 10 got label 2, with no word; a `txt` "red" with a BOM was a
    class of its own beside "red"."""
    members = []
    for i in range(12):
        members += [(f"k{i:02d}.jpg", _coded(i % 4)), (f"k{i:02d}.cls", ("\ufeff" + str(i)).encode())]
    shard = _tar(tmp_path / "cls.tar", members)
    out = tmp_path / "cls.iof"
    split = ["--val-fraction", "0"] if command == "preprocess" else []
    assert main([command, str(shard), "-o", str(out), *split]) == 0
    assert Manifest.read(out).classes == [str(i) for i in range(12)]
    import iofeed

    loader = iofeed.loader(str(out), batch_size=1, framework="numpy", augment=False, shuffle="none", workers=1)
    seen = sorted((int(labels[0]), label_from_pixels(images[0])) for images, labels in loader)
    assert [label for label, _ in seen] == list(range(12)) and all(label % 4 == coded for label, coded in seen)
    names = ["red", "green"]
    members = [m for i in range(8) for m in ((f"t{i}.jpg", _coded(i % 2)),
                                             (f"t{i}.txt", ("\ufeff" * (i % 4 == 0) + names[i % 2]).encode()))]
    assert main([command, str(_tar(tmp_path / "txt.tar", members)), "-o", str(tmp_path / "txt.iof"), *split]) == 0
    assert Manifest.read(tmp_path / "txt.iof").classes == ["green", "red"]


def test_txt_class_names_differing_only_in_unicode_form_are_refused_naming_both(tmp_path, capsys):
    """`café` written NFC by one tool and NFD by another became two classes printed the same."""
    members = []
    for i in range(6):
        text = unicodedata.normalize("NFD" if i == 5 else "NFC", "café" if i % 2 else "tea")
        members += [(f"k{i}.jpg", _coded(i % 2)), (f"k{i}.txt", text.encode())]
    shard = _tar(tmp_path / "s.tar", members)
    assert main(["preprocess", str(shard), "-o", str(tmp_path / "out.iof")]) != 0
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "differ only in Unicode normalisation" in err[0] and "s.tar#k5" in err[0]
