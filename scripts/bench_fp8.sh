#!/usr/bin/env bash
# FP8 training's quality on the CPU's emulation, for docs/PERFORMANCE.md: the demo model
# (configs/fortunes.yaml) in bf16 and with every block GEMM in FP8 under each recipe, val_loss
# after STEPS steps against bf16's (within 1 % is the bar) and the emulation's step time.
#
#   scripts/bench_fp8.sh   # BUILD_DIR=build STEPS=400 RECIPES="tensorwise rowwise delayed tensorwise+e4m3"
#
# The work is scripts/bench/ (python3 -m bench fp8); the settings above are environment variables
# it reads.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHONPATH=scripts exec python3 -m bench fp8 "$@"
