#!/usr/bin/env bash
# The test-time budget: lists the slowest tests of the last ctest run from ctest's own log
# (<build>/Testing/Temporary/LastTest.log), slowest first, marking those over the budget of 60 s a
# test (a test over it is made smaller or split: docs/PERFORMANCE.md, "CI time"), then the
# number of tests and their total.
#   usage: bash scripts/test_times.sh [BUILD_DIR (default build)] [COUNT (default 15)]
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
count=${2:-15}
budget=60
log=$build/Testing/Temporary/LastTest.log
if [[ ! -f $log ]]; then
  echo "error: no $log: run the tests first (bash scripts/test.sh)" >&2
  exit 1
fi
# A test's block in the log opens with "N/M Test: NAME" and holds "Test time = SECONDS sec".
times=$(awk '/^[0-9]+\/[0-9]+ Test: /{name = $3}
             /^Test time = /{printf "%9.1f  %s\n", $4, name}' "$log" | sort -rn)
if [[ -z $times ]]; then
  echo "error: $log holds no test times" >&2
  exit 1
fi
echo "slowest $count tests of the last run ($log), seconds:"
head -n "$count" <<<"$times" | awk -v budget="$budget" \
  '{ printf "%s%s\n", $0, ($1 > budget ? "   over the " budget " s budget" : "") }'
awk '{ total += $1; n += 1 } END { printf "%d tests, %.0f s in all\n", n, total }' <<<"$times"
