#!/usr/bin/env bash
# Lints (ruff), type-checks all of src strictly (mypy; both configured in pyproject.toml), then
# runs the test suite, in the project's own environment (created on first use). Arguments go to
# pytest, e.g. `-m "not slow"`.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup-env.sh
.venv/bin/python -m ruff check src tests bench scripts
.venv/bin/python -m mypy  # the files in pyproject's [tool.mypy]: seconds, once its cache is warm
exec .venv/bin/python -m pytest "$@"
