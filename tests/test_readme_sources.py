"""The README's "Bring your data" commands, run as written on small inputs of each kind (the shard
ranges shortened to the two shards made here, the URL pointed at a server on 127.0.0.1)."""
from __future__ import annotations

import json
import shlex
from pathlib import Path

import pytest

from helpers.images import make_image_tree
from helpers.sources import encode, picture, write_webdataset
from iofeed.cli.main import main
from iofeed.format.manifest import Manifest

README = Path(__file__).resolve().parents[1] / "README.md"


def readme_commands() -> list[list[str]]:
    """The `iofeed ...` lines of the first code block under "## Bring your data"."""
    text = README.read_text(encoding="utf-8").split("## Bring your data", 1)[1]
    block = text.split("```bash", 1)[1].split("```", 1)[0]
    return [shlex.split(line, comments=True) for line in block.splitlines() if line.startswith("iofeed ")]


def _inputs(root: Path) -> None:
    """Every input the commands name, in `root`."""
    import datasets
    import pyarrow as pa
    import pyarrow.parquet as pq

    make_image_tree(root / "photos", classes=2, per_class=3)
    write_webdataset(root, shards=2, per_shard=3)
    for n in range(2):
        (root / f"shard-{n:06d}.tar").rename(root / f"shards-{n:06d}.tar")
    images = [encode(picture(i), "png") for i in range(6)]
    pq.write_table(pa.table({"image": images, "label": [i % 2 for i in range(6)]}), root / "train.parquet")
    features = datasets.Features({"image": datasets.Image(), "label": datasets.ClassLabel(names=["a", "b"])})
    datasets.Dataset.from_dict({"image": [picture(i) for i in range(4)], "label": [0, 1, 0, 1]},
                               features=features).save_to_disk(str(root / "hf_saved"))
    (root / "images").mkdir()
    for i in range(4):
        (root / "images" / f"{i}.png").write_bytes(images[i])
    (root / "labels.csv").write_text('path,label\n0.png,cat\n1.png,"[""cat"", ""dog""]"\n2.png,dog\n3.png,dog\n')
    (root / "val").mkdir()
    for i in range(4):
        (root / "val" / f"ILSVRC2012_val_{i + 1:08d}.JPEG").write_bytes(encode(picture(i), "jpg"))
    (root / "val_labels.txt").write_text("".join(f"ILSVRC2012_val_{i + 1:08d}.JPEG n0{i % 2}\n" for i in range(4)))


@pytest.mark.slow
@pytest.mark.storage
@pytest.mark.pyarrow
@pytest.mark.datasets
def test_every_bring_your_data_command_runs_as_written(tmp_path, monkeypatch):
    from helpers.storage import CountingServer

    commands = readme_commands()
    assert len(commands) == 8 and {c[1] for c in commands} == {"preprocess", "index"}
    outputs = [c[c.index("-o") + 1] for c in commands]
    assert len(set(outputs)) == len(outputs), f"pasted in order, a second line would find {outputs} written"
    _inputs(tmp_path)
    monkeypatch.chdir(tmp_path)
    server = CountingServer(tmp_path)
    try:
        for command in commands:
            args = [a.replace("000127", "000001").replace("https://host", server.url) for a in command[1:]]
            out = Path(args[args.index("-o") + 1])
            assert main(args) == 0, command  # as pasted: no --overwrite
            manifest = Manifest.read(out)
            assert sum(info.samples for info in manifest.splits.values()) >= 4, command
            if out.name == "ml.iof":
                assert manifest.targets["kind"] == "multi_label"
            if out.name == "val.iof":  # ImageNet's validation images stay one split
                assert {name: info.samples for name, info in manifest.splits.items()} == {"val": 4}
            rejected = [json.loads(line) for line in (out / "rejected.jsonl").read_text().splitlines()]
            assert all(r["reason"] for r in rejected)
    finally:
        server.close()
