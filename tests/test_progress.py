"""Progress that behaves in a log (issue 29): long steps say how far they are, and a log that is
not a terminal gets a plain line now and then, never carriage returns."""
from __future__ import annotations

import io
from pathlib import Path

from helpers.images import make_colour_tree
from iofeed.cli.main import main
from iofeed.runtime.progress import progress


def _lines(text: str) -> list[str]:
    assert "\r" not in text, repr(text[:300])
    assert text == "" or text.endswith("\n")
    return text.splitlines()


def test_a_log_that_is_not_a_terminal_gets_whole_lines_now_and_then() -> None:
    quiet = io.StringIO()
    for _ in progress(range(5000), desc="preprocess", unit="img", file=quiet):  # 30 s between lines
        pass
    assert _lines(quiet.getvalue())[-1].startswith("preprocess: 5000/5000 img (100%)"), quiet.getvalue()
    assert len(_lines(quiet.getvalue())) <= 3, "not a line per item: the start, the end"
    every = io.StringIO()
    with progress(total=3, desc="upload", unit="file", file=every, log_seconds=0) as bar:
        for _ in range(3):
            bar.update(1)
    lines = _lines(every.getvalue())
    assert [line.split(",")[0] for line in lines] == [f"upload: {n}/3 file ({100 * n / 3:.0f}%)" for n in range(4)]
    assert all("#" not in line and "█" not in line for line in lines), "no bar glyphs in a log"


def test_preprocess_in_a_log_writes_lines_not_carriage_returns(tmp_path: Path, capsys) -> None:
    tree = make_colour_tree(tmp_path / "tree", per_class=3)
    assert main(["preprocess", str(tree), "-o", str(tmp_path / "out.iof"), "--workers", "1"]) == 0
    err = capsys.readouterr().err
    assert any(line.startswith("preprocess: 12/12 img (100%)") for line in _lines(err)), err


def test_inspect_verify_says_how_far_it_is(tmp_path: Path, capsys) -> None:
    """`inspect --verify` was silent for 35 s on the stand-in (hours on ImageNet)."""
    tree = make_colour_tree(tmp_path / "tree", per_class=3)
    assert main(["preprocess", str(tree), "-o", str(tmp_path / "out.iof"), "--workers", "1"]) == 0
    capsys.readouterr()
    assert main(["inspect", str(tmp_path / "out.iof"), "--verify"]) == 0
    err = capsys.readouterr().err
    assert any(line.startswith("verify: 12/12 img (100%)") for line in _lines(err)), err


def test_the_bench_says_what_its_preprocess_wrote(tmp_path: Path, capsys) -> None:
    """The bench's raw preprocess ended without a summary."""
    from iofeed.cli.bench.inputs import resolve_inputs

    tree = make_colour_tree(tmp_path / "tree", per_class=3)
    inputs = resolve_inputs(tree, {"raw"}, False)
    out = capsys.readouterr().out
    assert inputs.raw == tmp_path / "tree.raw.iof"
    said = next(line for line in out.splitlines() if line.startswith(f"iofeed bench: {inputs.raw} written"))
    assert "12 images found" in said and "0 rejected" in said and "images/sec" in said, said
