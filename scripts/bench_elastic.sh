#!/usr/bin/env bash
# Elastic DiLoCo across an emulated WAN on one machine, for docs/PERFORMANCE.md: WORKERS worker
# jobs in network namespaces (scripts/wan.sh, root), a Redis store in the root namespace, the
# link scaled so that a sync lasts about RATIO inner steps (OpenDiLoCo's 37); synchronous data
# parallelism across the same link, then DiLoCo at H 50, 200 and 500.
#
#   sudo scripts/bench_elastic.sh   # BUILD_DIR=build CONFIG=configs/fortunes_diloco.yaml WORKERS=2
#                                   # RTT_MS=100 RATIO=37 (RATE=4mbit overrides the scaling)
#
# Per run: compute utilisation (inner steps over wall time) and the all-reduce's share of it.
# The work is scripts/bench/elastic.py (python3 -m bench elastic).
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHONPATH=scripts exec python3 -m bench elastic "$@"
