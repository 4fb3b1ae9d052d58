#!/usr/bin/env bash
# Kill -9 at any moment (docs/CHAOS.md): tests/chaos/chaos.py over every variant with KILLS kills each
# (default 20: 60 in all), on token shards made from the fortunes corpus (scripts/prepare_fortunes.sh)
# or DATA=dir. Prints a line per kill and the summary table; exit 1 if any trial did not end bitwise
# equal to its uninterrupted run. Needs a build (BUILD_DIR, default build).
set -euo pipefail
cd "$(dirname "$0")/../.."
build=${BUILD_DIR:-build}
data=${DATA:-}
vocab=${VOCAB:-64}
if [ -z "$data" ]; then
  bash scripts/prepare_fortunes.sh >/dev/null
  data=data/fortunes
  vocab=4096
fi
exec python3 tests/chaos/chaos.py --build "$build" --data "$data" --kills "${KILLS:-20}" \
  --seed "${SEED:-1}" --steps "${STEPS:-24}" --vocab "$vocab" --work "${WORK:-runs/chaos}" "$@"
