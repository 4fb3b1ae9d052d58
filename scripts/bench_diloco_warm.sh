#!/usr/bin/env bash
# DiLoCo from a warm start against data parallelism at equal compute, for docs/PERFORMANCE.md.
#
#   scripts/bench_diloco_warm.sh   # BUILD_DIR=build WARM=1500 WARM_BATCH=8 WARM_LR=4.0e-3
#                                  # STEPS=420 BATCH=32 WORKERS=4 H=14 VARIANTS=all
#
# A data-parallel warm-up to a checkpoint on Python 3.11's documentation (Debian's python3.11-doc,
# tokenized into data/pydocs on the first run), then data parallelism (AdamW over an lr grid, and
# Muon) and DiLoCo (outer settings, AdamW or Muon inside, int4, H halved and doubled) continue
# from its weights (`train --init`) for STEPS steps of the same tokens each. One table row per
# run: val_loss, its gaps to the best data-parallel runs, the bytes across workers and how many
# times fewer. About 25 minutes on 2 cores. The work is scripts/bench/diloco_warm.py
# (python3 -m bench diloco_warm); the settings above are environment variables it reads.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHONPATH=scripts exec python3 -m bench diloco_warm "$@"
