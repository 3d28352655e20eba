#!/usr/bin/env bash
# The GPU measurements the open issues ask for (docs/benchmarks.md, "Not measured yet"), in steps
# that each fit one 10-minute call on a device machine with one GPU and no package index.
#
# Here, once:   bash scripts/gpu-session.sh wheels     # .whl/: simplejpeg, webdataset for Python 3.12
#               bash ../shared/scripts/pack-dali-offline.sh   # .dali-parts/p00..p08 (DALI, 9 x 62 MiB)
# There, from the repository root, back to back (the machine keeps /tmp while warm), one call each:
#   9 calls, each carrying one part:   mkdir -p /tmp/dw && cp .dali-parts/pNN /tmp/dw/
#   then, carrying .whl:               bash scripts/gpu-session.sh setup data        (~4 min)
#   the GPU tests first:               bash scripts/gpu-session.sh tests             (~4 min)
#                                      bash scripts/gpu-session.sh tests-slow        (~4 min)
#   then the measurements:             bash scripts/gpu-session.sh bench resnet50 a  (~6 min)
#                                      bash scripts/gpu-session.sh bench resnet50 b  (~6.5 min)
#                                      bash scripts/gpu-session.sh doctor            (~2 min)
#   if device time is left:            bash scripts/gpu-session.sh bench resnet18 a  (and b)
#   the CUDA copy deviation seen on 2026-11-24:  bash scripts/gpu-session.sh diag-copy  (~1 min)
# Keep the calls back to back: the machine is given back after 30 s idle, and /tmp (data, DALI)
# goes with it; a later call then starts a bare machine.
# Results go to $OUT (which the device tool brings back), else to bench/results. Each bench call
# writes its JSON after every round: a call cut off at its limit keeps every finished window.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
DATA=${IOFEED_DATA:-/tmp/iofeed-data}
RESULTS=${OUT:-bench/results}
# pytest and its pure-Python dependencies for Python 3.12: the device has no package index
WHEELS="simplejpeg==1.9.0 webdataset==1.0.2 braceexpand==0.1.7
        pytest==9.2.0 iniconfig==2.3.1 pluggy==1.7.0 packaging==26.3 pygments==2.21.0"
# Feeds split in two calls, each with the baseline (torchvision-Nw) and, added by the bench, the
# synthetic ceiling. Per call: ~25 s start-up per feed (process, PyTorch, the model, first batch)
# + 2 s warm-up, then 3 rounds of one 10 s window per feed plus its untimed drain (capacity + 1
# batches of 256: up to ~5 s for torchvision-1w). a: 5 hosts, ~135 + 3 x 66 s = ~5.6 min;
# b: 6 hosts, ~162 + 3 x 71 s = ~6.3 min.
FEEDS_A="torchvision-1w,torchvision-Nw,iofeed-folder,iofeed-dataset"
FEEDS_B="torchvision-Nw,iofeed-raw,iofeed-raw-gpu,iofeed-dali,dali-folder"
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
    tests)  # the tests only a GPU (or DALI) runs, but the slow bench test
      set -o pipefail
      "$PY" -m pytest -q -p no:cacheprovider -rs -m "(gpu or dali) and not slow" tests 2>&1 | tee "$RESULTS/gpu-tests.log" ;;
    diag-copy)  # the torch adapter's CUDA path against the CPU path, image by image
      "$PY" scripts/diag_cuda_copy.py 2>&1 | tee "$RESULTS/cuda-copy-diag.log" ;;
    tests-slow)  # the ResNet-50 bench over every feed at batch 256 on one GPU (memory), ~4 min
      set -o pipefail
      "$PY" -m pytest -q -p no:cacheprovider -rs -s -m "gpu and slow" tests 2>&1 | tee "$RESULTS/gpu-tests-slow.log" ;;
    bench-resnet50-a|bench-resnet50-b|bench-resnet18-a|bench-resnet18-b)  # 3 windows of 10 s per feed
      model=${1#bench-}; part=${model##*-}; model=${model%-*}
      feeds=$FEEDS_A; [ "$part" = b ] && feeds=$FEEDS_B
      iofeed bench "$DATA/c256" --model "$model" --device cuda --batch-size 256 --seconds 30 --rounds 3 \
        --feeds "$feeds" --json "$RESULTS/h100-$model-$part.json" ;;
    doctor)  # doctor against a deliberately input-bound run: one DataLoader worker, full-size JPEGs
      iofeed doctor "$DATA/c256" --json "$RESULTS/doctor-starved.json" -- \
        "$PY" bench/starved_train.py "$DATA/c256" --model resnet18 --workers 1 --seconds 60 ;;
    *) echo "unknown step '$1' (wheels, setup, data, tests, tests-slow, diag-copy, bench resnet50|resnet18 a|b, doctor)" >&2
       exit 2 ;;
  esac
}

[ $# -gt 0 ] || { echo "usage: bash scripts/gpu-session.sh STEP [STEP ...] (see the head of this file)" >&2; exit 2; }
while [ $# -gt 0 ]; do
  if [ "$1" = bench ]; then
    step "bench-${2:?bench needs a model: resnet50 or resnet18}-${3:?bench needs a part: a or b}"; shift 3
  else
    step "$1"; shift
  fi
done
