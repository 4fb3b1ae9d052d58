#!/usr/bin/env bash
# ZeRO stages side by side, for docs/PERFORMANCE.md.
#
#   scripts/bench_zero.sh          # BUILD_DIR=build STEPS=2 DP=4 PER_NODE=2 STAGES="0 1 2 3"
#                                  # REDUCTION=step ACCUM=1
#
# Trains a GPT-2 124M-shaped model (12 layers, d_model 768, 12 heads, vocab 50304; seq_len 128 so
# it runs on a CPU) on data/fortunes with DP data-parallel ranks, nodes simulated as blocks of
# PER_NODE ranks, under each ZeRO stage that runs, and prints for rank 0: the memory account
# (metrics.jsonl memory_bytes) next to the planner's, the measured peak RSS, the bytes sent in the
# last step by kind and link class next to the planner's count (both from `plan --explain` of the
# same config), and the median step time. It fails if a measured figure differs from the plan's.
# The work is scripts/bench/ (python3 -m bench zero); the settings above are
# environment variables it reads.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHONPATH=scripts exec python3 -m bench zero "$@"
