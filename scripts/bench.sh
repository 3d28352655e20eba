#!/usr/bin/env bash
# The main job: make the Caltech-256 stand-in, preprocess it, and run the benchmark on it.
# Data goes to data/ (kept between runs); results to bench/results/.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup-env.sh
iofeed=.venv/bin/iofeed
[ -d data/c256/256_ObjectCategories ] || $iofeed synth caltech256 data/c256
[ -f data/c256.iof/iofeed.json ] || $iofeed preprocess data/c256 -o data/c256.iof
$iofeed inspect data/c256.iof
