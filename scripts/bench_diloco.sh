#!/usr/bin/env bash
# DiLoCo against data-parallel training at equal compute, for docs/PERFORMANCE.md.
#
#   scripts/bench_diloco.sh        # BUILD_DIR=build STEPS=300 BATCH=8 WORKERS=4 VARIANTS=all
#
# The demo model (configs/fortunes.yaml) on the fortunes corpus. The baseline is data-parallel
# training on WORKERS ranks with a global batch of WORKERS·BATCH sequences (its gradients cross
# every rank each step); each DiLoCo variant runs WORKERS workers of one rank with BATCH sequences
# each (the same sequences per step, the same data: worker w reads every WORKERS-th sample from
# w). Every rank is put in a node of its own, so the baseline's traffic is inter-node and DiLoCo's
# is inter-worker. Prints, per variant: final val_loss, its gap to the baseline, and the bytes the
# job sent across the worker boundary (the baseline: across nodes) over the run, with the ratio.
# VARIANTS: a space-separated subset of the names in the table below, or "all".
set -euo pipefail
cd "$(dirname "$0")/.."

BUILD_DIR=${BUILD_DIR:-build}
STEPS=${STEPS:-300}
BATCH=${BATCH:-8}
WORKERS=${WORKERS:-4}
VARIANTS=${VARIANTS:-all}
source scripts/bench_setup.sh

# H values scaled to the run: the paper's 500 of 88 000 steps is about STEPS/176; we take
# STEPS/30, STEPS/6 and STEPS/3 (10, 50 and 100 at 300 steps).
h_small=$((STEPS / 30)) h_mid=$((STEPS / 6)) h_large=$((STEPS / 3))
declare -A settings=(
  [h${h_small}]="inner_steps=$h_small"
  [h${h_mid}]="inner_steps=$h_mid"
  [h${h_large}]="inner_steps=$h_large"
  [h${h_mid}_int8]="inner_steps=$h_mid compression=int8"
  [h${h_mid}_int4]="inner_steps=$h_mid compression=int4"
  [h${h_mid}_int4_ef]="inner_steps=$h_mid compression=int4 error_feedback=true"
  [h${h_mid}_f4]="inner_steps=$h_mid fragments=4"
  [h${h_mid}_butterfly]="inner_steps=$h_mid averaging=butterfly"
  [h${h_mid}_gossip]="inner_steps=$h_mid averaging=gossip"
  [h${h_mid}_moshpit]="inner_steps=$h_mid averaging=moshpit"
)
order="h${h_small} h${h_mid} h${h_large} h${h_mid}_int8 h${h_mid}_int4 h${h_mid}_int4_ef h${h_mid}_f4"
order+=" h${h_mid}_butterfly h${h_mid}_gossip h${h_mid}_moshpit"
[[ $VARIANTS == all ]] || order=$VARIANTS

common=(--set run.dir="$work" --set train.steps="$STEPS" --set train.micro_batch="$BATCH"
  --set train.eval_every=0 --set train.log_every=100 --set checkpoint.every=0
  --set parallel.gpus_per_node=1)

bench_header "steps $STEPS workers $WORKERS batch $BATCH per worker"
mpirun --oversubscribe -np "$WORKERS" "$BUILD_DIR/bin/train" configs/fortunes.yaml "${common[@]}" \
  --set run.name=baseline --set train.global_batch=$((WORKERS * BATCH)) \
  >"$work/baseline.log" 2>&1 || { cat "$work/baseline.log" >&2; exit 1; }
runs=("baseline -")
for name in $order; do
  args=()
  for kv in ${settings[$name]}; do args+=(--set "diloco.$kv"); done
  mpirun --oversubscribe -np "$WORKERS" "$BUILD_DIR/bin/train" configs/fortunes.yaml \
    "${common[@]}" --set run.name="$name" --set train.global_batch="$BATCH" \
    --set diloco.enabled=true --set diloco.workers="$WORKERS" "${args[@]}" \
    >"$work/$name.log" 2>&1 || { cat "$work/$name.log" >&2; exit 1; }
  runs+=("$name ${settings[$name]// /,}")
done

"$PYTHON" - "$work" "${runs[@]}" <<'PY'
import json, sys

work, runs = sys.argv[1], [arg.split(" ", 1) for arg in sys.argv[2:]]
def summary(name):
    val, cross = None, 0
    for line in open(f"{work}/{name}/metrics.jsonl"):
        m = json.loads(line)
        if "val_loss" in m:
            val = m["val_loss"]
        if "comm_bytes_job" in m:  # every step line, outer syncs included
            job = m["comm_bytes_job"]
            cross += job.get("inter_worker", 0) + job.get("inter_node", 0)
    return val, cross

base_val, base_bytes = summary("baseline")
print(f"| run | settings | val_loss | vs data-parallel | bytes across workers | fewer bytes |")
print(f"|---|---|---|---|---|---|")
for name, settings in runs:
    val, cross = summary(name)
    gap = (val - base_val) / base_val * 100
    ratio = base_bytes / cross if cross else float("inf")
    label = "data-parallel, global batch × workers" if name == "baseline" else settings
    print(f"| {name} | {label} | {val:.4f} | {gap:+.2f}% | {cross / 1e6:.1f} MB | {ratio:.0f}× |")
PY
