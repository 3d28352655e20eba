"""Typed results: what a type checker infers for `iofeed.loader(...)` is what docs/frameworks/*.md
say each framework gives (mypy, configured as pyproject's [tool.mypy]); the keywords every
overload shares are the signature's; the types cost no framework import at runtime; py.typed ships."""
from __future__ import annotations

import inspect
import re
import shutil
import subprocess
import sys
import textwrap
import zipfile
from pathlib import Path

import pytest

import iofeed

ROOT = Path(__file__).resolve().parents[1]
CHOOSERS = {"source", "batch_size", "framework", "output"}  # the overloads' own parameters

# Each `reveal_type` line is tagged `# NAME`; probes reveal the frameworks' own types, as mypy spells them.
PROGRAM = textwrap.dedent('''
    from typing import Any

    import jax
    import tensorflow as tf
    import torch
    from numpy.typing import NDArray

    import iofeed


    def probe(array: NDArray[Any], tensor: torch.Tensor, jarray: jax.Array, tft: tf.Tensor) -> None:
        reveal_type(array)  # NDARRAY
        reveal_type(tensor)  # TENSOR
        reveal_type(jarray)  # JAX_ARRAY
        reveal_type(tft)  # TF_TENSOR


    def loaders(name: str) -> None:
        reveal_type(iofeed.loader("d.iof", batch_size=8))  # numpy
        reveal_type(iofeed.loader("d.iof", batch_size=8, framework="numpy",  # numpy_extras
                                  output=iofeed.Output(extras=True)))
        reveal_type(iofeed.loader("d.iof", batch_size=8, framework="torch", seed=1,  # torch
                                  placement=iofeed.Placement(device="cpu")))
        reveal_type(iofeed.loader("d.iof", batch_size=8, framework="torch",  # torch_extras
                                  output=iofeed.Output(target="multi_hot", extras=True)))
        reveal_type(iofeed.loader(  # torch_objects
            "d.iof", batch_size=8, framework="torch", shuffle=True, drop_last=False, workers=2, seed=1,
            output=iofeed.Output(dtype=None, memory_format="channels_last"), order=iofeed.Order(block_shards=2),
            resources=iofeed.Resources(prefetch=2), cache=iofeed.Cache(limit=1 << 30),
            skips=iofeed.Skips(max_skipped=None), pin_memory=True, persistent_workers=False))
        reveal_type(iofeed.loader("d.iof", batch_size=8, framework="jax"))  # jax
        reveal_type(iofeed.loader("d.iof", batch_size=8, framework="jax",  # jax_extras
                                  output=iofeed.Output(extras=True)))
        reveal_type(iofeed.loader("d.iof", batch_size=8, output=iofeed.Output(extras=name == "x")))  # any_extras
        reveal_type(iofeed.loader("d.iof", batch_size=8, framework="tf"))  # tf
        reveal_type(iofeed.loader("d.iof", batch_size=8, framework="keras"))  # keras
        reveal_type(iofeed.loader("d.iof", batch_size=8, framework=name))  # any_name
        for images, labels in iofeed.loader("d.iof", batch_size=8, framework="torch"):
            reveal_type(images)  # torch_images
        with iofeed.loader("d.iof", batch_size=8, framework="torch") as opened:
            reveal_type(opened)  # torch_with
        for batch in iofeed.loader("d.iof", batch_size=8, framework="jax").repeat():
            reveal_type(batch)  # jax_repeat
        iofeed.loader("d.iof", batch_size=8, framework="tf").iofeed_loader.close()  # TF_LOADER
        iofeed.loader("d.iof", batch_size=8, framework="keras").iofeed_loader.close()  # KERAS_LOADER
        iofeed.loader("d.iof", batch_size=8, sed=1)  # MISSPELT
        iofeed.loader("d.iof", batch_size=8, workers="4")  # WRONG_TYPE
        iofeed.loader("d.iof", batch_size=8, order=iofeed.Resources(prefetch=2))  # WRONG_OBJECT
        iofeed.loader("d.iof", batch_size=8, prefetch=2)  # EARLIER_SPELLING
        iofeed.Order(seed=1)  # MOVED_FIELD
        iofeed.loader("d.iof", batch_size=8, collate_fn=list)  # REFUSED_DATALOADER
''')


def expected(t: dict[str, str]) -> dict[str, str]:
    """What docs/frameworks/*.md (and `loader`'s docstring) say each call gives, in mypy's spelling."""
    def loader_of(*items: str) -> str:
        return f"iofeed.loading.loader.Loader[tuple[{', '.join(items)}]]"

    numpy, torch, jax, tft = t["NDARRAY"], t["TENSOR"], t["JAX_ARRAY"], t["TF_TENSOR"]
    dataset = f"tensorflow.data.Dataset[tuple[{tft}, {tft}]]"
    return {
        "numpy": loader_of(numpy, numpy), "numpy_extras": loader_of(numpy, numpy, "list[Any]"),
        "torch": loader_of(torch, torch), "torch_objects": loader_of(torch, torch),
        "torch_extras": loader_of(torch, torch, "list[Any]"),
        "jax": loader_of(jax, jax), "jax_extras": loader_of(jax, jax, "list[Any]"),
        "tf": dataset, "keras": f"{dataset} | iofeed.adapters.keras.KerasBatches",
        "any_name": "Any", "any_extras": "Any", "torch_images": torch, "torch_with": loader_of(torch, torch),
        "jax_repeat": f"tuple[{jax}, {jax}]",
    }


def run_mypy(program: Path) -> tuple[dict[str, str], dict[str, list[str]]]:
    """(tag -> revealed type, tag -> error messages) of mypy over `program`, by the tags of its lines."""
    done = subprocess.run([sys.executable, "-m", "mypy", "--config-file", str(ROOT / "pyproject.toml"), str(program)],
                          cwd=ROOT, capture_output=True, text=True, timeout=600)  # the checkout's mypy cache
    tags = {n: line.rsplit("# ", 1)[1] for n, line in enumerate(program.read_text().splitlines(), 1) if "# " in line}
    revealed: dict[str, str] = {}
    errors: dict[str, list[str]] = {}
    for line in done.stdout.splitlines():
        # by file name: mypy's cache may report an unchanged program under an earlier run's path
        match = re.match(rf"(?:.*/)?{re.escape(program.name)}:(\d+): (note|error): (.*)$", line)
        if not match:
            continue
        tag, kind, text = tags.get(int(match.group(1)), f"line {match.group(1)}"), match.group(2), match.group(3)
        if kind == "note" and text.startswith("Revealed type is "):
            revealed[tag] = text.removeprefix("Revealed type is ").strip('"')
        elif kind == "error":
            errors.setdefault(tag, []).append(text)
    assert revealed, f"mypy revealed nothing:\n{done.stdout}\n{done.stderr}"
    return revealed, errors


@pytest.mark.mypy
@pytest.mark.torch
@pytest.mark.jax
@pytest.mark.tf
@pytest.mark.slow  # a cold mypy cache reads torch, jax and the tensorflow stubs: ~20 s; warm: ~2 s
def test_revealed_loader_types_are_what_the_docs_say_each_framework_gives(tmp_path: Path) -> None:
    program = tmp_path / "uses_iofeed.py"
    program.write_text(PROGRAM)
    revealed, errors = run_mypy(program)
    assert "Any" not in {revealed[p] for p in ("NDARRAY", "TENSOR", "JAX_ARRAY", "TF_TENSOR")}, revealed
    want = expected(revealed)
    assert {tag: revealed.get(tag) for tag in want} == want
    wrong = {"MISSPELT", "WRONG_TYPE", "WRONG_OBJECT", "EARLIER_SPELLING", "MOVED_FIELD", "REFUSED_DATALOADER"}
    assert set(errors) == wrong, errors  # every other line type-checks, strictly
    assert any('did you mean "seed"' in e for e in errors["MISSPELT"]), errors["MISSPELT"]


def test_loader_keywords_are_the_signatures_own() -> None:
    """The overloads' shared keywords (`LoaderKeywords`) name every other keyword of `loader`, with
    the same annotation, and torch DataLoader's keywords as they are taken at run time (flags, or
    None only): a keyword added to the signature alone fails here, not in users' editors; and
    `Output`'s typed keywords are its fields."""
    import dataclasses

    from iofeed.loading.dataloader_compat import ACCEPTED, REFUSED
    from iofeed.loading.keywords import LoaderKeywords
    from iofeed.options.groups import Output, OutputFields

    params = inspect.signature(iofeed.loader).parameters
    signature = {name: p.annotation for name, p in params.items() if name not in CHOOSERS}
    dataloader = {**{name: "bool | None" for name in ACCEPTED}, **{name: "None" for name in REFUSED}}
    typed = {name: ref.__forward_arg__ for name, ref in LoaderKeywords.__annotations__.items()}
    assert typed == {**signature, **dataloader}
    fields = {f.name: f.type for f in dataclasses.fields(Output) if f.name != "extras"}
    assert {name: ref.__forward_arg__ for name, ref in OutputFields.__annotations__.items()} == fields


def test_types_import_no_framework_at_runtime() -> None:
    """`Loader[...]` works at runtime, and importing iofeed (with its types) imports no framework."""
    code = ("import sys, iofeed; iofeed.Loader[tuple[int, int]]; import iofeed.loading.keywords; "
            "print(sorted(m for m in ('torch', 'tensorflow', 'jax', 'keras') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, check=True)
    assert out.stdout.strip() == "[]"


def test_wheel_ships_py_typed(tmp_path: Path) -> None:
    """PEP 561: the wheel carries `iofeed/py.typed`, so type checkers read iofeed's annotations."""
    tree = tmp_path / "tree"  # a copy: the build's own folders stay out of the checkout
    shutil.copytree(ROOT / "src", tree / "src", ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, tree / name)
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w",
                    str(tmp_path / "dist"), str(tree)], capture_output=True, text=True, timeout=600, check=True)
    (wheel,) = (tmp_path / "dist").glob("iofeed-*.whl")
    assert "iofeed/py.typed" in zipfile.ZipFile(wheel).namelist()
