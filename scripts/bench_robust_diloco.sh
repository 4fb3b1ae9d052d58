#!/usr/bin/env bash
# Robust and authenticated DiLoCo, for docs/PERFORMANCE.md: the val_loss of four workers with one
# misbehaving under each aggregation rule and the screen, the seconds and bytes of each rule per
# sync, and what a secret costs an elastic group per sync.
#
#   scripts/bench_robust_diloco.sh     # BUILD_DIR=build STEPS=100 BATCH=8 WORKERS=4 INNER_STEPS=10
#
# The work is scripts/bench/robust.py (python3 -m bench robust).
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHONPATH=scripts exec python3 -m bench robust "$@"
