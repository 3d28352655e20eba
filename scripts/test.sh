#!/usr/bin/env bash
# Runs the whole test suite in the project's own environment (created on first use).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup-env.sh
exec .venv/bin/python -m pytest "$@"
