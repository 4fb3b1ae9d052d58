#!/usr/bin/env bash
# DiLoCo from a warm start against data parallelism at equal compute, for docs/PERFORMANCE.md.
#
#   scripts/bench_diloco_warm.sh   # BUILD_DIR=build WARM=1000 STEPS=1500 BATCH=8 WORKERS=4 VARIANTS=all
#
# A data-parallel warm-up to a checkpoint on Python 3.11's documentation (Debian's python3.11-doc,
# tokenized into data/pydocs on the first run), then data parallelism and DiLoCo (H from STEPS/150
# to STEPS/30, with and without int8) continue from its weights (`train --init`) for STEPS steps
# of the same tokens each. One table row per run: val_loss, its gap to data parallelism, the bytes
# across workers and how many times fewer. The work is scripts/bench/diloco_warm.py
# (python3 -m bench diloco_warm); the settings above are environment variables it reads.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHONPATH=scripts exec python3 -m bench diloco_warm "$@"
