#!/usr/bin/env bash
# A dense GPT against mixtures of experts on the fortunes corpus, for docs/PERFORMANCE.md: the
# dense model, then 8 experts in every second block with top-2 and top-1 routing, each at ep 1,
# 2 and 4, all on RANKS data-parallel ranks for STEPS steps.
#
#   scripts/bench_moe.sh   # BUILD_DIR=build CONFIG=configs/fortunes.yaml STEPS=200 RANKS=4
#                          # EXPERTS=8 RUN_DIR=/tmp/bench_moe
#
# Per run: parameters (total, active per token), final val_loss, median tokens/s, rank 0's model
# state, activations and peak RSS, and the all-to-all bytes rank 0 sent per step.
# The work is scripts/bench/ (python3 -m bench moe); the settings above are environment
# variables it reads.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHONPATH=scripts exec python3 -m bench moe "$@"
