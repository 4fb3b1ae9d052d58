#!/usr/bin/env bash
# The pipeline schedules side by side on 8 ranks, for docs/PERFORMANCE.md.
#
#   scripts/bench_schedules.sh        # BUILD_DIR=build STEPS=10 ROUNDS=2
#
# Trains a 16-layer GPT (d_model 256, seq_len 128) under gpipe, 1f1b, zb-h1, zb-h2, interleaved
# and zbv (two chunks per rank) at pp 4
# (dp 2) and pp 8 with 8 to 32 micro-batches, ROUNDS times each (the fastest round is reported),
# and prints per run the step time and, per pipeline stage,
# the measured time and idle time of its program against the planner's timed simulation on this
# machine (ranks sharing cores), the activation memory against the planner's account, and the
# bubble each schedule leaves on dedicated devices.
# The work is scripts/bench/ (python3 -m bench schedules); the settings above are
# environment variables it reads.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHONPATH=scripts exec python3 -m bench schedules "$@"
