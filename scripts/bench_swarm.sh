#!/usr/bin/env bash
# SWARM against the static pipeline on the fortunes corpus, for docs/PERFORMANCE.md: GPipe over 4
# one-layer stages (4 ranks, and 8 as pp 4 × dp 2), swarms of 4 and 8 peers (two drivers), int8
# boundaries, one stage-2 peer (or pipeline rank) slowed 2x, and a peer killed every KILL_EVERY
# seconds (replaced by a fresh one that takes its stage's state).
#
#   scripts/bench_swarm.sh   # BUILD_DIR=build STEPS=100 MICRO=4 LANES=1 KILL_EVERY=20
#
# Per run: final val_loss, tokens/s over the median step, the drivers' boundary bytes per step.
# The work is scripts/bench/swarm.py (python3 -m bench swarm).
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHONPATH=scripts exec python3 -m bench swarm "$@"
