#!/usr/bin/env bash
# Communication and activation memory of 3D layouts, for docs/PERFORMANCE.md.
#
#   scripts/bench_layouts.sh          # BUILD_DIR=build STEPS=3 NP_MAX=8
#
# Trains a GPT-2 124M-shaped model (12 layers, d_model 768, 12 heads, vocab 50304; seq_len 128 so it
# runs on a CPU) for STEPS steps under several (dp, tp, pp) layouts on data/fortunes, and prints
# rank 0's bytes sent and seconds spent in communication per parallel axis in the last step, next to
# the planner's byte counts of the same step (`plan --explain` of the same config); then the
# activation memory of every pipeline stage under GPipe and 1F1B. Every replica runs m = 4
# micro-batches of 2 sequences per step (8 for the schedule comparison). Timings on an
# oversubscribed CPU measure MPI over shared memory, not a network: the byte counts are the portable
# result.
# The work is scripts/bench/ (python3 -m bench layouts); the settings above are
# environment variables it reads.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHONPATH=scripts exec python3 -m bench layouts "$@"
