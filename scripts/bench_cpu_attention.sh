#!/usr/bin/env bash
# The CPU backend's causal attention against sequence length, for docs/PERFORMANCE.md: forward and
# backward time and the scratch memory each pass grew, beside another build's `bench` (BASELINE)
# in the same run.
#
#   scripts/bench_cpu_attention.sh   # BUILD_DIR=build BASELINE=path/to/bench SEQ_LENS="1024 2048 4096"
#                                    # ROUNDS=3 BATCH=1 HEADS=12 HEAD_SIZE=64 REPEATS=5
#
# The work is scripts/bench/attention.py (python3 -m bench attention).
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHONPATH=scripts exec python3 -m bench attention "$@"
