#!/usr/bin/env bash
# Validates and measures the CUDA backend on a GPU host, from the repository root, with the
# binaries scripts/gpu_pack.sh put in .gpu/: every `cuda` test, then `bench attention` (Strata
# against cuDNN) and `bench train` on the GPT-2 configs. Writes one log per step into LOG_DIR and
# a summary line per step to stdout; a failing step does not stop the later ones.
#   usage: bash .gpu/gpu_check.sh LOG_DIR [quick]     (quick: tests only)
set -uo pipefail
log_dir=${1:?usage: gpu_check.sh LOG_DIR [quick]}
mode=${2:-all}
here=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$log_dir"
export STRATA_BIN_DIR="$here/bin" OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
nvidia-smi --query-gpu=name,memory.total,clocks.max.sm --format=csv >"$log_dir/gpu.txt" 2>&1

step() {  # step NAME COMMAND...: runs it, logs its output, prints its status and time
  local name=$1
  shift
  local start=$SECONDS
  "$@" >"$log_dir/$name.log" 2>&1
  local status=$?
  printf '%-40s exit %3d  %4ds\n' "$name" "$status" $((SECONDS - start))
}

for test in "$here"/tests/*_test; do
  step "test_$(basename "$test")" "$test"
done
[[ $mode == quick ]] && exit 0

for dtype in bf16 fp16 fp32; do
  step "bench_attention_$dtype" "$here/bin/bench" attention --dtype "$dtype"
done
for model in 124m 350m 774m 1.5b; do
  step "bench_train_$model" "$here/bin/bench" train --config "configs/gpt2_$model.yaml" \
    --set train.micro_batch=8 --steps 20
done
