#!/usr/bin/env bash
# The GPU measurements the open issues ask for (docs/benchmarks.md, "Not measured yet"), in steps
# that each fit one 10-minute call on a device machine with one GPU and no package index.
#
# Here, once:   bash scripts/gpu-session.sh wheels     # .whl/: simplejpeg, webdataset for Python 3.12
#               bash ../shared/scripts/pack-dali-offline.sh   # .dali-parts/p00..p08 (DALI, 9 x 62 MiB)
# There, from the repository root, back to back (the machine keeps /tmp while warm):
#   9 calls, each carrying one part:   mkdir -p /tmp/dw && cp .dali-parts/pNN /tmp/dw/
#   then, carrying .whl:               bash scripts/gpu-session.sh setup data tests
#   then:                              bash scripts/gpu-session.sh bench resnet50
#                                      bash scripts/gpu-session.sh bench resnet18
#                                      bash scripts/gpu-session.sh doctor
# Results go to $OUT (which the device tool brings back), else to bench/results.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
DATA=${IOFEED_DATA:-/tmp/iofeed-data}
RESULTS=${OUT:-bench/results}
WHEELS="simplejpeg==1.9.0 webdataset==1.0.2 braceexpand==0.1.7"
export PYTHONPATH=/tmp/site:$PWD/src${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1
mkdir -p "$RESULTS"

iofeed() { "$PY" -m iofeed.cli "$@"; }

step() {
  case "$1" in
    wheels)  # here: wheels for the device's Python 3.12, into .whl/ (ignored by git)
      "$PY" -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
        --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
        -d .whl $WHEELS
      ls -la .whl ;;
    setup)  # there: DALI from the carried parts, the carried wheels, and what the machine has
      if compgen -G "/tmp/dw/p*" >/dev/null; then cat /tmp/dw/p* | tar xf - -C /tmp; fi
      wheels=$(compgen -G "/tmp/whl/*.whl"; compgen -G ".whl/*.whl") || true
      [ -z "$wheels" ] || "$PY" -m pip install -q --no-index --no-deps --no-compile --target /tmp/site $wheels
      nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv
      "$PY" -c "import torch, torchvision; print('torch', torch.__version__, 'torchvision', torchvision.__version__)"
      "$PY" -c "import nvidia.dali as d; print('DALI', d.__version__)" || echo "DALI not installed: its feeds are skipped"
      "$PY" -c "import simplejpeg, cv2; print('simplejpeg', simplejpeg.__version__, 'OpenCV', cv2.__version__)" || true ;;
    data)  # the full-size stand-in, preprocessed as JPEG and as raw pixels, beside it
      [ -d "$DATA/c256/256_ObjectCategories" ] || iofeed synth caltech256 "$DATA/c256"
      [ -f "$DATA/c256.iof/iofeed.json" ] || iofeed preprocess "$DATA/c256" -o "$DATA/c256.iof"
      [ -f "$DATA/c256.raw.iof/iofeed.json" ] || iofeed preprocess "$DATA/c256" -o "$DATA/c256.raw.iof" --format raw ;;
    tests)  # the tests only a GPU (or DALI) runs
      set -o pipefail
      "$PY" -m pytest -q -p no:cacheprovider -m "gpu or dali" tests 2>&1 | tee "$RESULTS/gpu-tests.log" ;;
    bench-resnet50|bench-resnet18)  # every feed beside the ceiling and the plain DataLoader: 3 windows of 10 s each
      model=${1#bench-}
      iofeed bench "$DATA/c256" --model "$model" --batch-size 256 --seconds 30 --rounds 3 \
        --json "$RESULTS/h100-$model.json" ;;
    doctor)  # doctor against a deliberately input-bound run: one DataLoader worker, full-size JPEGs
      iofeed doctor "$DATA/c256" --json "$RESULTS/doctor-starved.json" -- \
        "$PY" bench/starved_train.py "$DATA/c256" --model resnet18 --workers 1 --seconds 60 ;;
    *) echo "unknown step '$1' (wheels, setup, data, tests, bench resnet50|resnet18, doctor)" >&2; exit 2 ;;
  esac
}

[ $# -gt 0 ] || { echo "usage: bash scripts/gpu-session.sh STEP [STEP ...] (see the head of this file)" >&2; exit 2; }
while [ $# -gt 0 ]; do
  if [ "$1" = bench ]; then
    step "bench-${2:?bench needs a model: resnet50 or resnet18}"; shift 2
  else
    step "$1"; shift
  fi
done
