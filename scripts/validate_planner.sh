#!/usr/bin/env bash
# The planner against measurements on this machine, for docs/PLANNER.md.
#
#   scripts/validate_planner.sh        # BUILD_DIR=build STEPS=10 RANKS=8 ROUNDS=2
#
# 1. `bench calibrate` describes this machine for RANKS ranks at the validation model's shapes
#    (written to $work/cluster.yaml, printed).
# 2. For each layout below and for the planner's own first choice: `plan --layout given` predicts
#    the step time and rank 0's memory; `train` runs STEPS steps on data/fortunes under mpirun
#    and rank 0's metrics give the measured step time (median of steps 3 to STEPS), its memory
#    account (memory_bytes) and its peak resident memory (peak_rss_mib, the whole process).
#    Ranks are bound to cores round-robin (see `placement`).
#    Every layout runs ROUNDS times, the rounds one after the other (so slow drift of a shared
#    machine spreads over all layouts); its time is the median over the rounds.
# 3. Prints a markdown table and the summary: Spearman rank correlation and median relative error
#    of the step time, the same for memory, and whether the planner's first choice was the
#    fastest measured layout or within 10% of it.
# The work is scripts/bench/ (python3 -m bench validate_planner); the settings above are
# environment variables it reads.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHONPATH=scripts exec python3 -m bench validate_planner "$@"
