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
set -euo pipefail
cd "$(dirname "$0")/.."

BUILD_DIR=${BUILD_DIR:-build}
STEPS=${STEPS:-300}
BATCH=${BATCH:-8}
WORKERS=${WORKERS:-4}
VARIANTS=${VARIANTS:-all}
source scripts/bench_setup.sh

# H scaled to the run: STEPS/30, STEPS/6 and STEPS/3 (10, 50 and 100 at 300 steps); streaming
# needs F = 4 to divide H, so its H is STEPS/6 rounded down to a multiple of 4.
small=$((STEPS / 30)) mid=$((STEPS / 6)) large=$((STEPS / 3))
streaming=$((mid / 4 * 4))
lr2="optimizer.lr=4.0e-3 optimizer.min_lr=4.0e-4"  # twice the config's
# "tuned": outer momentum 0.5 instead of 0.9, the inner learning rate doubled (see PERFORMANCE.md)
tuned="diloco.outer_momentum=0.5 $lr2"
names=(baseline baseline_lr2 "h$small" "h$mid" "h$large" "h${mid}_int8" "h${mid}_int4"
  "h${mid}_int4_ef" "h${streaming}_f4" "h${mid}_overlap" "h${mid}_butterfly" "h${mid}_gossip"
  "h${mid}_moshpit" "h${small}_tuned" "h${mid}_int8_tuned" "h${large}_tuned")
settings=("" "$lr2" "diloco.inner_steps=$small" "diloco.inner_steps=$mid"
  "diloco.inner_steps=$large" "diloco.inner_steps=$mid diloco.compression=int8"
  "diloco.inner_steps=$mid diloco.compression=int4"
  "diloco.inner_steps=$mid diloco.compression=int4 diloco.error_feedback=true"
  "diloco.inner_steps=$streaming diloco.fragments=4"
  "diloco.inner_steps=$mid diloco.overlap=true"
  "diloco.inner_steps=$mid diloco.averaging=butterfly"
  "diloco.inner_steps=$mid diloco.averaging=gossip"
  "diloco.inner_steps=$mid diloco.averaging=moshpit"
  "diloco.inner_steps=$small $tuned" "diloco.inner_steps=$mid diloco.compression=int8 $tuned"
  "diloco.inner_steps=$large $tuned")

common=(--set run.dir="$work" --set train.steps="$STEPS" --set train.micro_batch="$BATCH"
  --set train.eval_every=0 --set train.log_every=100 --set checkpoint.every=0
  --set parallel.gpus_per_node=1)

bench_header "steps $STEPS workers $WORKERS batch $BATCH per worker"
echo "| run | settings | val_loss | vs data-parallel | bytes across workers | fewer bytes |"
echo "|---|---|---|---|---|---|"
for i in "${!names[@]}"; do
  name=${names[$i]}
  [[ $VARIANTS == all || " $VARIANTS " == *" $name "* ]] || continue
  args=()
  for kv in ${settings[$i]}; do args+=(--set "$kv"); done
  if [[ $name == baseline* ]]; then
    args+=(--set train.global_batch=$((WORKERS * BATCH)))
  else
    args+=(--set train.global_batch="$BATCH" --set diloco.enabled=true
      --set diloco.workers="$WORKERS")
  fi
  mpirun --oversubscribe -np "$WORKERS" "$BUILD_DIR/bin/train" configs/fortunes.yaml \
    "${common[@]}" --set run.name="$name" "${args[@]}" >"$work/$name.log" 2>&1 ||
    { echo "| $name | failed: $(grep -m1 error: "$work/$name.log") |"; continue; }
  "$PYTHON" - "$work" "$name" "${settings[$i]}" <<'PY'
import json, os, sys

work, name, settings = sys.argv[1:4]
sync = hidden = 0.0  # seconds of outer syncs, and of them overlapped by inner steps
def summary(run):
    global sync, hidden
    val, cross = None, 0
    for line in open(f"{work}/{run}/metrics.jsonl"):
        m = json.loads(line)
        if "val_loss" in m:
            val = m["val_loss"]
        if "outer_sync_s" in m and run == name:
            sync += m["outer_sync_s"]
            hidden += m["outer_hidden_s"]
        # Across nodes: the step lines; across workers: every sync's own line (a sync applied
        # after the last step, with overlap, is in no step line).
        if "comm_bytes_job" in m:
            cross += m["comm_bytes_job"].get("inter_node", 0)
        if "outer_comm_bytes_job" in m:
            cross += m["outer_comm_bytes_job"].get("inter_worker", 0)
    return val, cross

val, cross = summary(name)
label = settings.replace("diloco.", "") or "the config's"
if name.startswith("baseline"):
    label = "data-parallel, batch × workers, " + label
if hidden > 0:
    label += f" ({hidden:.2f} of {sync:.2f} s of syncs hidden)"
if not os.path.exists(f"{work}/baseline/metrics.jsonl"):
    print(f"| {name} | {label} | {val:.4f} | | {cross / 1e6:.1f} MB | |")
    sys.exit()
base_val, base_bytes = summary("baseline")
gap = (val - base_val) / base_val * 100
ratio = f"{base_bytes / cross:.0f}×" if cross else "∞"
print(f"| {name} | {label} | {val:.4f} | {gap:+.2f}% | {cross / 1e6:.1f} MB | {ratio} |")
PY
done
