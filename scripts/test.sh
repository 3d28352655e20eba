#!/usr/bin/env bash
# Lints (ruff, configured in pyproject.toml), then runs the test suite, in the project's own
# environment (created on first use). Arguments go to pytest, e.g. `-m "not slow"`.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup-env.sh
.venv/bin/python -m ruff check src tests bench scripts
exec .venv/bin/python -m pytest "$@"
