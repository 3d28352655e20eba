"""docs/frameworks/: one page per framework, each saying its default in its first line and naming
tests that exist (the patterns it shows run there, on the CPU)."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PAGES = ("torch", "lightning", "timm", "keras", "jax", "tf")


@pytest.mark.parametrize("name", PAGES)
def test_each_framework_page_starts_with_its_default_and_names_real_tests(name):
    text = (ROOT / "docs" / "frameworks" / f"{name}.md").read_text()
    first = text.split("\n\n", 2)[1]
    assert first.startswith("**Default:"), first[:80]
    tests = set(re.findall(r"tests/(test_\w+\.py)", text))
    assert tests and all((ROOT / "tests" / t).exists() for t in tests), tests


def test_the_readme_links_every_page():
    readme = (ROOT / "README.md").read_text()
    assert all(f"docs/frameworks/{name}.md" in readme for name in PAGES)
