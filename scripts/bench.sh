#!/usr/bin/env bash
# The main job: make the Caltech-256 stand-in, preprocess it, and run the loader benchmark on it:
# every feed side by side with the plain torchvision DataLoader.
# Cost of a first run on 2 cores: ~15-20 min; disk ~17 GB: .venv ~9.6 GB (scripts/setup-env.sh),
# data/ ~7.2 GB (stand-in 1.1 GiB, JPEG dataset 0.6 GiB, raw-pixel dataset 5.5 GiB, made by
# `iofeed bench` only when a raw feed is selected). Later runs reuse both: ~6 min.
# Results: data/c256.bench/bench-<date>.json and .png (or --json PATH).
# Extra arguments go to `iofeed bench` (e.g. --seconds 60, --feeds torchvision-Nw,iofeed-dataset).
set -euo pipefail
cd "$(dirname "$0")/.."
say() { echo "bench.sh: $*"; }
say "setting up .venv (first use: ~9.6 GB, ~3-6 min; then instant)"
bash scripts/setup-env.sh
iofeed=.venv/bin/iofeed
if [ ! -d data/c256/256_ObjectCategories ]; then
  say "making the Caltech-256 stand-in in data/c256 (30,607 images, ~1.1 GiB, ~1-2 min)"
  $iofeed synth caltech256 data/c256
fi
if [ ! -f data/c256.iof/iofeed.json ]; then
  say "preprocessing data/c256 into data/c256.iof (JPEG, ~0.6 GiB, ~1 min)"
  $iofeed preprocess data/c256 -o data/c256.iof
fi
$iofeed inspect data/c256.iof
say "benchmarking (each feed 30 s in 3 rounds, after a warm-up)"
$iofeed bench data/c256 --seconds 30 --rounds 3 "$@"
