#!/usr/bin/env bash
# Context parallelism against sequence length on this host's CPU, for docs/PERFORMANCE.md.
#
#   scripts/bench_context.sh        # BUILD_DIR=build STEPS=4 SEQ_LENS="1024 2048 4096 8192 16384"
#
# Trains a tiny GPT (2 layers, d_model 64) on 2 sequences a step at each seq_len, on one rank, on
# dp 2, and at cp 2 and 4 by ring and by all_gather, and prints per run the step time, tokens/s, a rank's
# activation memory next to the planner's and the bytes it sent over the cp group next to the
# planner's. The work is scripts/bench/ (python3 -m bench context); the settings above are
# environment variables it reads.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHONPATH=scripts exec python3 -m bench context "$@"
