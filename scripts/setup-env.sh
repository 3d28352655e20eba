#!/usr/bin/env bash
# Creates (or reuses) .venv with iofeed and the pinned frameworks used by the tests and the
# benchmark: PyTorch + torchvision (CPU use of the CUDA build), tensorflow-cpu, NVIDIA DALI, JAX...
# First use: ~9.6 GB in .venv and ~3-6 min (downloads); later uses: a second (a stamp file says
# the pins are installed). It says what it does before each step.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
say() { echo "setup-env: $*"; }
if [ ! -x .venv/bin/python ]; then
  say "creating .venv with $("$PY" --version 2>&1)"
  "$PY" -m venv .venv
fi
stamp=.venv/.iofeed-deps-$(sha256sum scripts/requirements-pinned.txt pyproject.toml | sha256sum | cut -c1-12)
if [ ! -f "$stamp" ]; then
  say "installing $(grep -c '^[a-zA-Z]' scripts/requirements-pinned.txt) pinned packages" \
      "(scripts/requirements-pinned.txt) into .venv: ~9.6 GB, ~3-6 min on first use; pip's progress follows"
  .venv/bin/python -m pip install -q --upgrade pip 2>&1 | grep -v '^WARNING: Location' || true
  .venv/bin/python -m pip install --progress-bar off -r scripts/requirements-pinned.txt 2>&1 \
    | grep --line-buffered -E '^ *(Collecting|Downloading|Using cached|Installing|ERROR)' | cut -c1-110 || true
  say "installing iofeed itself (editable)"
  .venv/bin/python -m pip install -q --no-deps -e . 2>&1 | grep -v '^WARNING: Location' || true
  say "checking that every pinned framework imports"
  .venv/bin/python -c "import iofeed, torch, torchvision, tensorflow, nvidia.dali, webdataset, ray.data, simplejpeg, cv2, jax, albumentations, kornia, pyarrow, datasets, grain" >/dev/null
  touch "$stamp"
  say "done: run .venv/bin/iofeed, or 'source .venv/bin/activate' for a bare 'iofeed'"
fi
