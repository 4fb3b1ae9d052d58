#!/usr/bin/env bash
# ZeRO-3 and its ZeRO++ switches side by side, for docs/PERFORMANCE.md.
#
#   scripts/bench_zero_plus_plus.sh     # BUILD_DIR=build STEPS=2 DP=8 PER_NODE=4
#
# Trains a GPT-2 124M-shaped model (12 layers, d_model 768, 12 heads, vocab 50304; seq_len 128 so it
# runs on a CPU) on data/fortunes with DP data-parallel ranks simulated as nodes of PER_NODE ranks,
# at ZeRO stage 3 alone, with each of qwZ, hpZ and qgZ, and with all three, and prints the bytes the
# whole job sent in the last step by link class (metrics.jsonl comm_bytes_job) next to the planner's
# count for the same config (`plan --explain`), the ratio of cross-node bytes to ZeRO-3's, rank 0's
# memory account and peak RSS, and the median step time. The script fails if a measured count
# differs from the planner's.
# The work is scripts/bench/ (python3 -m bench zero_plus_plus); the settings above are
# environment variables it reads.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHONPATH=scripts exec python3 -m bench zero_plus_plus "$@"
