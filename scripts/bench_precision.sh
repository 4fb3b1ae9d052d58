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
set -euo pipefail
cd "$(dirname "$0")/.."

BUILD_DIR=${BUILD_DIR:-build}
CONFIG=${CONFIG:-configs/fortunes.yaml}
ROUNDS=${ROUNDS:-3}
STEPS=${STEPS:-20}
THREADS=${THREADS:-2}

if [[ ! -x "$BUILD_DIR/bin/bench" ]]; then
  cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
fi
ninja -C "$BUILD_DIR" bench >/dev/null

raw=$(mktemp)
trap 'rm -f "$raw"' EXIT

echo "# $(date -u +%Y-%m-%dT%H:%MZ) commit $(git rev-parse --short HEAD) config $CONFIG" \
  "cpu '$(lscpu | sed -n 's/^Model name: *//p')' nproc $(nproc) threads $THREADS"
combinations=(fp32,none fp32,selective fp32,full bf16,none bf16,selective bf16,full
  fp16,none fp16,selective fp16,full)
for ((round = 1; round <= ROUNDS; ++round)); do
  order=("${combinations[@]}")
  if ((round % 2 == 0)); then  # reversed, so no combination always runs first or last
    order=()
    for ((i = ${#combinations[@]} - 1; i >= 0; --i)); do order+=("${combinations[i]}"); done
  fi
  for combination in "${order[@]}"; do
    IFS=, read -r compute recompute <<<"$combination"
    OMP_NUM_THREADS=$THREADS OPENBLAS_NUM_THREADS=$THREADS "$BUILD_DIR/bin/bench" train \
      --config "$CONFIG" --set precision.compute="$compute" --set recompute="$recompute" \
      --steps "$STEPS" | tee -a "$raw"
  done
done

python3 - "$raw" <<'EOF'
import json
import sys

best = {}
for line in open(sys.argv[1]):
    r = json.loads(line)
    key = (r["compute"], r["recompute"])
    if key not in best or r["tokens_per_s"] > best[key]["tokens_per_s"]:
        best[key] = r
base = best[("fp32", "none")]
print("\n| compute | recompute | step ms | tokens/s | vs fp32 none | activation MiB | per layer MiB"
      " | peak RSS MiB | MFU |")
print("|---|---|---|---|---|---|---|---|---|")
for compute in ("fp32", "bf16", "fp16"):
    for recompute in ("none", "selective", "full"):
        r = best[(compute, recompute)]
        print(f"| {compute} | {recompute} | {r['step_ms']:.1f} | {r['tokens_per_s']:.0f} | "
              f"{r['step_ms'] / base['step_ms']:.2f}× | {r['activation_mib']:.1f} | "
              f"{r['activation_mib_per_layer']:.2f} | {r['peak_rss_mib']:.0f} | {r['mfu']:.0%} |")
EOF
