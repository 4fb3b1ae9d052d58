#!/usr/bin/env bash
# Cost of emulated mixed precision and of activation recomputation on the CPU, for
# docs/PERFORMANCE.md: `bench train --config CONFIG` under precision.compute fp32/bf16/fp16 ×
# recompute none/selective/full.
#
#   scripts/bench_precision.sh   # BUILD_DIR=build CONFIG=configs/fortunes.yaml ROUNDS=3 STEPS=20
#                                # THREADS=2
#
# Each round runs the nine combinations once (in reverse order every other round), each a fresh
# process reporting the median step of STEPS; the best round of each combination (highest
# tokens/s) is kept, so a round disturbed by another job on the machine does not decide the
# result. Raw JSON lines first, then a table.
# The work is scripts/bench/ (python3 -m bench precision); the settings above are
# environment variables it reads.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHONPATH=scripts exec python3 -m bench precision "$@"
