#!/usr/bin/env bash
# The main job: make the Caltech-256 stand-in, preprocess it (JPEG and raw pixels), and run the
# loader benchmark on it: every feed side by side with the plain torchvision DataLoader.
# Data goes to data/ (kept between runs); results to bench/results/ (JSON + PNG).
# Extra arguments go to `iofeed bench` (e.g. --seconds 60, --feeds torchvision-Nw,iofeed-raw).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup-env.sh
iofeed=.venv/bin/iofeed
[ -d data/c256/256_ObjectCategories ] || $iofeed synth caltech256 data/c256
[ -f data/c256.iof/iofeed.json ] || $iofeed preprocess data/c256 -o data/c256.iof
[ -f data/c256.raw.iof/iofeed.json ] || $iofeed preprocess data/c256 -o data/c256.raw.iof --format raw
$iofeed inspect data/c256.iof
$iofeed inspect data/c256.raw.iof
$iofeed bench data/c256 --seconds 30 --rounds 3 "$@"
