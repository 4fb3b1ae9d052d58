#!/usr/bin/env bash
# The optimizers (optimizer.name: adamw, adafactor, adamw8bit, muon) side by side, for docs/PERFORMANCE.md.
#
#   scripts/bench_optimizers.sh   # BUILD_DIR=build DP=2 STEPS=3 QUALITY=0 MEMORY=1 QUALITY_VALUES=
#     OPTIMIZERS="adamw adamw+host adamw+disk adafactor adafactor+disk adamw8bit adamw8bit+disk muon muon+disk"
#
# A GPT-2 124M-shaped model (T 512, micro-batch 1) at DP ranks, ZeRO 0 and 1: rank 0's optimizer
# state, peak RSS and step time per optimizer. QUALITY=1 adds the demo model's val_loss after 400
# steps on fortunes for each optimizer over its learning-rate grid. The work is
# scripts/bench/optimizers.py (python3 -m bench optimizers).
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHONPATH=scripts exec python3 -m bench optimizers "$@"
