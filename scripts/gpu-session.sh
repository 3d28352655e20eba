#!/usr/bin/env bash
# The GPU check (issue 37, docs/benchmarks.md "The GPU check"): one device call of at most 6 minutes,
# so that a 15-minute GPU slot leaves room to run it again.
#
# Here, once:   bash scripts/gpu-session.sh wheels     # .whl/: what the device lacks, for CPython 3.12
#               bash scripts/gpu-session.sh --dry-run  # every step's CPU part, tiny, on the CPU (no GPU)
# There, from the repository root, carrying .whl (one call, timeout_s 420: 6 min of steps, the rest for its start):
#               timeout 370 bash scripts/gpu-session.sh
#
# Steps, in this order, each under its own timeout (a hung feed costs its own step, not the run):
# setup, data (a stand-in made in under a minute on 16 cores), ResNet-18 and ResNet-50 at 224 px
# (the synthetic ceiling, the workers engine, the GPU-decode engine), the loader alone (the two
# engines, and the workers engine's default layout beside channels_last), the gpu-marked tests
# (a 2-rank torchrun on the one GPU among them), and the summary against the targets. Results are
# named after the GPU (h100-*, h200-*: nvidia-smi's name) and written to $OUT (else
# bench/results/gpu-<date>/) as each exists. At most 8 files, as the device tool brings back: the
# session log, three bench JSONs, the two model runs' PNGs (GPU utilisation over time), the test
# log and the summary (the bench table and each target met or missed, with its number).
set -uo pipefail
cd "$(dirname "$0")/.."
# the project's environment where there is one (here, after scripts/setup-env.sh), else the machine's python3
PY=${PYTHON:-$([ -x .venv/bin/python ] && echo .venv/bin/python || echo python3)}
export PYTHONUNBUFFERED=1

WHEELS="simplejpeg==1.9.0"  # the rest (torch, torchvision, JAX, OpenCV, psutil, nvidia-ml-py, pytest) is there
NVJPEG=${IOFEED_GPU_FEED:-iofeed-nvjpeg}  # the GPU-decode engine's bench feed (engine="nvjpeg")
DRY=0
case "${1:-}" in
  wheels)  # here: wheels for the device's Python 3.12 into .whl/ (ignored by git; carried by the call)
    "$PY" -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
      --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
      -d .whl $WHEELS || exit 1
    ls -la .whl; exit 0 ;;
  --dry-run) DRY=1 ;;
  "") ;;
  *) echo "usage: bash scripts/gpu-session.sh [--dry-run | wheels]  (see the head of this file)" >&2; exit 2 ;;
esac

# Seconds per step on the GPU host (the dry run allows four times as much). Bench steps: hosts start
# side by side (~30-40 s with PyTorch, the model and 15 workers each), 2 s warm-up, then one timed
# window of 10 s per feed (>= 10 s after warm-up, as the targets ask) and its untimed drain, the
# ceiling first; a feed 20 s late (STALL) is killed and marked failed while the others go on.
declare -A BUDGET=([setup]=15 [data]=40 [resnet18]=85 [resnet50]=80 [loader]=55 [tests]=60 [summary]=10)
STEPS="setup data resnet18 resnet50 loader tests summary"
total=0; for s in $STEPS; do total=$((total + BUDGET[$s])); done

export PYTHONPATH=/tmp/site:$PWD/src${PYTHONPATH:+:$PYTHONPATH}
# what every step needs, before any step: one line naming what is missing (simplejpeg comes in setup)
"$PY" -c "import numpy, PIL, torch, torchvision, psutil, matplotlib, pytest" 2>/dev/null || {
  echo "$PY cannot import numpy, Pillow, torch, torchvision, psutil, matplotlib and pytest: set PYTHON=... to one" \
       "that can (here: bash scripts/setup-env.sh makes .venv)" >&2; exit 2; }
# the GPU-decode engine's feed: required for real (the check measures it); a dry run before it is merged
# checks every other step and says what it left out
NOTE=""
if "$PY" -c "import sys; from iofeed.cli.bench.feeds import CATALOGUE; sys.exit('$NVJPEG' not in CATALOGUE)"; then
  ENGINES=iofeed-dataset,$NVJPEG
elif [ $DRY = 1 ]; then
  ENGINES=iofeed-dataset; NOTE="note: $NVJPEG is not a bench feed in this checkout yet: the dry run leaves it out"
else
  echo "$NVJPEG is not a bench feed in this checkout: merge the GPU-decode engine (engine='nvjpeg') first" >&2
  exit 2
fi
if [ $DRY = 1 ]; then
  WORK=$(mktemp -d "${TMPDIR:-/tmp}/iofeed-gpu-dry.XXXXXX")
  RESULTS=${OUT:-$WORK/results}; DATA=$WORK/data; PLOTS=$WORK
  DEVICE=cpu; MODEL=none; PER_CLASS=2; BATCH=8; SIZE=32; WINDOW=0.3; WORKERS=2; STALL=120
else
  RESULTS=${OUT:-bench/results/gpu-$(date -u +%Y-%m-%d-%H%M)}; DATA=${IOFEED_DATA:-/tmp/iofeed-gpu}
  PLOTS=/tmp/iofeed-gpu-plots  # the loader's PNG: the device tool brings back 8 files
  DEVICE=cuda; MODEL=; PER_CLASS=32; BATCH=256; SIZE=224; WINDOW=10; WORKERS=15; STALL=20
fi
mkdir -p "$RESULTS" "$DATA" "$PLOTS"
LOG=$RESULTS/session.log
exec > >(tee -a "$LOG") 2>&1

gpu_name() {  # "h100", "h200", ...: the GPU's model from nvidia-smi, "cpu" without one
  local name
  name=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1)
  [ -n "$name" ] || { echo cpu; return; }
  echo "$name" | tr 'A-Z' 'a-z' | grep -oE '\b[a-z][0-9]{2,4}[a-z]?\b' | head -1 || echo gpu
}
GPU=$(gpu_name); [ $DRY = 1 ] && GPU=dry-$GPU
iofeed() { "$PY" -m iofeed.cli.main "$@"; }
bench() {  # bench NAME MODEL DEVICE FEEDS PNG [options]: one bench run, its JSON named after the GPU
  local name=$1 model=$2 device=$3 feeds=$4 png=$5; shift 5
  iofeed bench "$DATA/c256.iof" --model "$model" --device "$device" --batch-size "$BATCH" --image-size "$SIZE" \
    --seconds "$WINDOW" --rounds 1 --warmup 2 --feeds "$feeds" --no-warm-cache --stall-seconds "$STALL" \
    --workers "$WORKERS" --json "$RESULTS/$GPU-$name.json" --plot "$png" "$@"
}

step_setup() {
  local wheels; wheels=$(compgen -G ".whl/*.whl") || true
  if [ $DRY = 1 ]; then  # the wheels are for CPython 3.12 on x86-64: checked, not installed here
    [ -n "$wheels" ] || echo "no .whl/ yet: run 'bash scripts/gpu-session.sh wheels' before the GPU run"
    [ -z "$wheels" ] || du -ch $wheels | tail -1
  elif [ -n "$wheels" ]; then
    "$PY" -m pip install -q --no-index --no-deps --no-compile --target /tmp/site $wheels
  fi
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv 2>/dev/null || echo "no nvidia-smi"
  "$PY" -c "import torch, torchvision; print('torch', torch.__version__, 'torchvision', torchvision.__version__,
'cuda', torch.cuda.is_available())"
  "$PY" -c "import simplejpeg, cv2; print('simplejpeg', simplejpeg.__version__, 'OpenCV', cv2.__version__)" \
    || echo "no simplejpeg or OpenCV: the loader falls back to Pillow (slower)"
  nproc
}
step_data() {  # 257 classes x PER_CLASS images, preprocessed to the JPEG dataset every feed reads
  [ -d "$DATA/c256/256_ObjectCategories" ] || iofeed synth caltech256 "$DATA/c256" --per-class "$PER_CLASS"
  [ -f "$DATA/c256.iof/iofeed.json" ] || iofeed preprocess "$DATA/c256" -o "$DATA/c256.iof"
}
step_resnet18() { bench resnet18 "${MODEL:-resnet18}" "$DEVICE" "$ENGINES" "$RESULTS/$GPU-resnet18.png"; }
step_resnet50() { bench resnet50 "${MODEL:-resnet50}" "$DEVICE" "$ENGINES" "$RESULTS/$GPU-resnet50.png"; }
step_loader() {  # no model: each engine's batches normalised on the device; both layouts of the workers engine
  bench loader none "$DEVICE" "$ENGINES,iofeed-nchw" "$PLOTS/$GPU-loader.png"
}
step_tests() {  # the gpu-marked tests (the bench's own ResNet-50 run aside: the steps above are that), the
               # 2-rank torchrun on one GPU among them; the dry run only collects them
  local only=(); [ $DRY = 1 ] && only=(--collect-only)
  local spread=(); "$PY" -c "import xdist" 2>/dev/null && [ $DRY = 0 ] && spread=(-n 4)
  "$PY" -m pytest -q -p no:cacheprovider -rs --continue-on-collection-errors -m gpu \
    -k "not test_resnet50_bench_fits_every_feed_on_the_gpu" "${spread[@]}" "${only[@]}" tests 2>&1 \
    | tee "$RESULTS/$GPU-tests.log"
}
step_summary() { "$PY" scripts/gpu_summary.py "$RESULTS" "$GPU" | tee "$RESULTS/$GPU-summary.txt"; }

echo "iofeed GPU check on $GPU: results to $RESULTS$([ $DRY = 1 ] && echo ' (dry run: tiny sizes, CPU)')"
[ -z "$NOTE" ] || echo "$NOTE"
echo "plan:$(for s in $STEPS; do printf ' %s %s s,' "$s" "${BUDGET[$s]}"; done | sed 's/,$//'); total $total s"
started=$SECONDS
failed=""
for s in $STEPS; do
  # the dry run checks the steps, not their speed: on a loaded laptop it gets four times the budget
  limit=$(( BUDGET[$s] * (DRY ? 4 : 1) ))
  echo "=== $s (budget ${BUDGET[$s]} s) $(date -u +%H:%M:%S)"
  t0=$SECONDS
  # each step in its own process group under its own timeout: a hung feed ends with its step
  timeout --kill-after=2 "$limit" bash -c "set -o pipefail; $(declare -f); $(declare -p BUDGET DRY RESULTS DATA \
    PLOTS DEVICE MODEL PER_CLASS BATCH SIZE WINDOW WORKERS STALL GPU PY ENGINES); step_$s"
  rc=$?
  [ $rc = 0 ] || failed="$failed $s(rc=$rc)"
  echo "=== $s: rc $rc in $((SECONDS - t0)) s"
done
echo "steps failed or cut off:${failed:- none}; $((SECONDS - started)) s in all"
echo "total $(( (total + 59) / 60 )) min"
[ -z "$failed" ]
