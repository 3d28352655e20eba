#!/usr/bin/env bash
# Creates (or reuses) .venv with iofeed and the pinned frameworks used by the tests and the
# benchmark: PyTorch + torchvision (CPU use of the CUDA build), tensorflow-cpu, NVIDIA DALI.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  "$PY" -m venv .venv
fi
stamp=.venv/.iofeed-deps-$(sha256sum scripts/requirements-pinned.txt pyproject.toml | sha256sum | cut -c1-12)
if [ ! -f "$stamp" ]; then
  .venv/bin/python -m pip install -q --upgrade pip 2>&1 | grep -v '^WARNING: Location' || true
  .venv/bin/python -m pip install -q -r scripts/requirements-pinned.txt 2>&1 | grep -v '^WARNING: Location' || true
  .venv/bin/python -m pip install -q --no-deps -e . 2>&1 | grep -v '^WARNING: Location' || true
  .venv/bin/python -c "import iofeed, torch, torchvision, tensorflow, nvidia.dali, webdataset, ray.data, simplejpeg, cv2, jax, albumentations, kornia, pyarrow, datasets, grain" >/dev/null
  touch "$stamp"
fi
