#!/usr/bin/env bash
# DiLoCo against data-parallel training at equal compute, for docs/PERFORMANCE.md.
#
#   scripts/bench_diloco.sh        # BUILD_DIR=build STEPS=300 BATCH=8 WORKERS=4 VARIANTS=all
#
# The demo model (configs/fortunes.yaml) on the fortunes corpus. The baselines are data-parallel
# training on WORKERS ranks with a global batch of WORKERS·BATCH sequences (gradients cross every
# rank each step), at the config's learning rate and at twice it; each DiLoCo variant runs WORKERS
# workers of one rank with BATCH sequences each (the same sequences per step and the same data:
# worker w reads every WORKERS-th sample from w). Every rank is a node of its own, so the
# baselines' traffic is inter-node and DiLoCo's inter-worker. One table row per run as it ends:
# final val_loss, its gap to the first baseline, the bytes the job sent across the worker
# boundary (baselines: across nodes) over the run, and how many times fewer than the baseline's.
# VARIANTS: a space-separated subset of the names below, or "all".
# The work is scripts/bench/ (python3 -m bench diloco); the settings above are
# environment variables it reads.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHONPATH=scripts exec python3 -m bench diloco "$@"
