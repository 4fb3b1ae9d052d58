#!/usr/bin/env bash
# Validates and measures the CUDA backend on a GPU host that lacks the build machine's Debian
# libraries, with the binaries scripts/gpu_pack.sh put in .gpu/ (unpacked from .gpu.tar.gz when
# there is no .gpu/) and a runtime-library bundle (docs/PERFORMANCE.md, "CUDA backend").
#   usage: bash scripts/gpu_check.sh MODE LOG_DIR [BUNDLE]
#   MODE     quick:    every `cuda` test (kernels, model, partitions, then cuda_layouts_test, the
#                      slowest, last)
#            run:      the real runs: configs/fortunes.yaml on the GPU in fp32 for 20 steps (each
#                      step's loss within 1e-4 of the CPU fp32 run's) and in bf16 for 400 steps
#                      (val_loss within 1% of the CPU fp32 run's), against the references that
#                      gpu_pack.sh computed on the build machine (.gpu/ref) on the corpus it
#                      tokenized there (.gpu/data)
#            bench:    `bench attention` in bf16, fp16 and fp32 (Strata against cuDNN 9) and
#                      `bench train` on the GPT-2 124M, 350M, 774M and 1.5B configs and the
#                      Llama-style 125M, 350M and 1B configs (configs/llama_*.yaml); then FP8
#                      (tensorwise, delayed) on 350M-1.5B and the Llama 1B (BENCH_FP8_MODELS)
#            sanitize: compute-sanitizer memcheck, then racecheck, on each kernel test
#            profile:  Nsight Compute's duration of every kernel launch of `bench train` (GPT-2
#                      PROFILE_MODEL, default 124m, micro-batch 8, bf16, no recomputation, one
#                      warm-up and PROFILE_STEPS (2) timed steps), summed per kernel by
#                      scripts/kernel_profile.py: where the step's GPU time goes
#            all:      quick, run and bench in one job
#   LOG_DIR  receives two files, rewritten after every step so that a run stopped from outside
#            still leaves what it finished: summary.txt (a line per step: name, exit code,
#            seconds, and for a bench step the JSON lines it printed) and gpu_logs.tgz (every
#            step's whole output, and the preflight's).
#   BUNDLE   the runtime libraries (Open MPI, HDF5, yaml-cpp, OpenBLAS, SentencePiece...) as a
#            .tar.gz holding a folder with env.sh (unpacked into /tmp), an unpacked such folder,
#            or `none` for the host's own. Default: .bundle.tar.gz in the repository root, else
#            an already unpacked /tmp/.bundle, else the host's own.
# Environment: BENCH_MODELS, the GPT-2 sizes that `bench` times (default "124m 350m 774m 1.5b";
# one size a job where all do not fit in one; empty: attention alone), BENCH_LLAMA_MODELS, the
# Llama-style sizes (default "125m 350m 1b"; empty: none), BENCH_MICRO_BATCH (default 8), BENCH_RECOMPUTE
# (Strata's recompute, default none: PyTorch's reference recomputes nothing), BENCH_TORCH=0 to
# leave out PyTorch's figures; LAYOUTS=0 leaves cuda_layouts_test out of `quick`; TESTS, the
# kernel tests `quick` and `sanitize` run (names in .gpu/tests, in that order; default all);
# SANITIZE_TOOLS, the compute-sanitizer tools `sanitize` runs (default "memcheck racecheck"); STEP_LIMIT, seconds a step may run (default 240; then it is killed and reported as
# a timeout); TOTAL_LIMIT, seconds for all steps (default 540): no step starts once it is spent
# and a step's limit is cut to what is left, so that a job limited to 10 minutes still ends with
# its summary.
# A preflight runs first: the GPU (nvidia-smi -L), the C library, and `ldd` on every binary; a
# library not found stops the run before any step. Exit status: 0 when every step passed, 1 when
# any failed, timed out or did not run, 2 when the set-up or the preflight failed.
# At its end it prints (and adds to summary.txt) the rows to paste into docs/PERFORMANCE.md's table
# of what has run on a GPU: per job (quick, run, bench, sanitize, profile) the date, the card and
# driver (nvidia-smi), the commit (STRATA_COMMIT if given, else the one gpu_pack.sh recorded in
# .gpu/commit, else this checkout's `git rev-parse --short HEAD`), what ran and what passed.
set -euo pipefail
usage="usage: bash scripts/gpu_check.sh quick|run|bench|sanitize|profile|all LOG_DIR [BUNDLE]"
mode=${1:-}
log_dir=${2:-}
if [[ ! $mode =~ ^(quick|run|bench|sanitize|profile|all)$ || -z $log_dir ]]; then
  echo "$usage" >&2
  exit 2
fi
root=$(cd "$(dirname "$0")/.." && pwd)
gpu_dir=$root/.gpu
step_limit=${STEP_LIMIT:-240}
total_limit=${TOTAL_LIMIT:-540}
mkdir -p "$log_dir"
log_dir=$(cd "$log_dir" && pwd)
work=$(mktemp -d)/gpu_logs  # the step logs, packed into $log_dir/gpu_logs.tgz
mkdir -p "$work"
summary=$work/summary.txt
fail() {
  echo "gpu_check: $*" | tee -a "$work/preflight.log" >&2
  cp "$summary" "$log_dir/summary.txt" 2>/dev/null || true
  tar czf "$log_dir/gpu_logs.tgz" -C "$(dirname "$work")" gpu_logs
  exit 2
}
echo "# gpu_check $mode, $(date -u '+%Y-%m-%d %H:%M:%S UTC'), $(hostname)" >"$summary"

# --- Set-up -------------------------------------------------------------------------------------
if [[ ! -d $gpu_dir/bin && -f $root/.gpu.tar.gz ]]; then
  tar xzf "$root/.gpu.tar.gz" -C "$root" || fail "could not unpack $root/.gpu.tar.gz"
fi
[[ -d $gpu_dir/bin && -d $gpu_dir/tests ]] ||
  fail "$gpu_dir/bin and $gpu_dir/tests are missing (and no .gpu.tar.gz): run" \
    "scripts/gpu_pack.sh on the build machine"
cd "$root"  # bench train reads configs/ relative to the repository root

# CUDA libraries installed as Python wheels (nvidia-*: site-packages/nvidia/*/lib), a fallback for
# hosts whose toolkit, NCCL or cuDNN comes only that way. Looked up before the bundle's libraries
# are on the search path, which the host's python3 must not load.
wheel_libs=""
if command -v python3 >/dev/null; then
  wheel_libs=$(python3 -c '
import glob, os, site
roots = site.getsitepackages() + [site.getusersitepackages()]
dirs = {d for r in roots for d in glob.glob(os.path.join(r, "nvidia", "*", "lib"))}
print(":".join(sorted(dirs)))
' 2>/dev/null) || wheel_libs=""
fi

bundle=${3:-}
if [[ -z $bundle ]]; then
  if [[ -f $root/.bundle.tar.gz ]]; then
    bundle=$root/.bundle.tar.gz
  elif [[ -f /tmp/.bundle/env.sh ]]; then
    bundle=/tmp/.bundle
  else
    bundle=none
    echo "gpu_check: no .bundle.tar.gz and no /tmp/.bundle: using the host's own libraries"
  fi
fi
bundle_dir=""
if [[ $bundle != none ]]; then
  case $bundle in
    *.tar.gz | *.tgz)
      [[ -f $bundle ]] || fail "bundle $bundle not found"
      name=$(basename "$bundle")
      name=${name%.tar.gz}
      name=${name%.tgz}
      tar xzf "$bundle" -C /tmp || fail "could not unpack $bundle into /tmp"
      bundle_dir=/tmp/$name
      ;;
    *) bundle_dir=$bundle ;;
  esac
  [[ -f $bundle_dir/env.sh ]] || fail "the bundle has no env.sh ($bundle_dir/env.sh)"
  # shellcheck source=/dev/null
  source "$bundle_dir/env.sh"
  # Some packages still install their libraries under /lib rather than /usr/lib.
  if [[ -d $bundle_dir/root/lib/x86_64-linux-gnu ]]; then
    export LD_LIBRARY_PATH="$LD_LIBRARY_PATH:$bundle_dir/root/lib/x86_64-linux-gnu"
  fi
  echo "gpu_check: runtime libraries from $bundle_dir"
fi
chmod +x "$gpu_dir"/bin/* "$gpu_dir"/tests/*

# Open MPI aborts mpirun, and a singleton MPI_Init (nccl_communicator_test), when it finds no
# ssh/rsh, even for ranks on this host: `false` satisfies the check, and no remote host is used.
export OMPI_MCA_plm_rsh_agent=false OMPI_MCA_rmaps_base_oversubscribe=1
# Shared-memory transfers by plain copies: containers often forbid the cross-process reads (CMA)
# Open MPI tries first, which fails every message between ranks.
export OMPI_MCA_btl_vader_single_copy_mechanism=none
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export STRATA_BIN_DIR=$gpu_dir/bin  # where the tests find `train`

# --- Preflight ----------------------------------------------------------------------------------
binaries=("$gpu_dir"/bin/* "$gpu_dir"/tests/*)
missing_libraries() {  # the `ldd` lines that say "not found", over every binary
  local binary output
  for binary in "${binaries[@]}"; do
    output=$(ldd "$binary" 2>&1) || { echo "$binary: ldd failed: $output"; continue; }
    awk -v b="${binary#"$root"/}" '/not found/ { sub(/^[ \t]+/, ""); print b ": " $0 }' <<<"$output"
  done
}
cudnn_found() {  # bench attention loads libcudnn.so.9 at run time, which ldd does not see
  local dir dirs
  # Not `| grep -q`: its early exit can end ldconfig by SIGPIPE, which pipefail makes a failure.
  [[ $(ldconfig -p 2>/dev/null) == *libcudnn.so.9* ]] && return 0
  IFS=: read -ra dirs <<<"${LD_LIBRARY_PATH:-}"
  for dir in "${dirs[@]}"; do [[ -n $dir && -e $dir/libcudnn.so.9 ]] && return 0; done
  return 1
}
{
  if command -v nvidia-smi >/dev/null; then
    nvidia-smi -L || true
    nvidia-smi --query-gpu=name,memory.total,clocks.max.sm,driver_version --format=csv || true
  else
    echo "nvidia-smi: not found"
  fi
  echo "C library: $(ldd --version 2>&1 | sed -n 1p)"
  echo "CPU: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//'), $(nproc) cores"
} 2>&1 | tee "$work/preflight.log"
missing=$(missing_libraries)
# The build machine's copies of what the bundle lacks, only when the host lacks some of them.
if [[ -n $missing && -d $gpu_dir/lib ]]; then
  export LD_LIBRARY_PATH="${LD_LIBRARY_PATH:+$LD_LIBRARY_PATH:}$gpu_dir/lib"
  echo "preflight: added .gpu/lib (libraries the bundle lacks) to the search path" |
    tee -a "$work/preflight.log"
  missing=$(missing_libraries)
fi
if [[ -n $wheel_libs ]] && { [[ -n $missing ]] || ! cudnn_found; }; then
  export LD_LIBRARY_PATH="${LD_LIBRARY_PATH:+$LD_LIBRARY_PATH:}$wheel_libs"
  echo "preflight: added the CUDA libraries of Python wheels to the search path: $wheel_libs" |
    tee -a "$work/preflight.log"
  missing=$(missing_libraries)
fi
if [[ -n $missing ]]; then
  printf '%s\n' "gpu_check: libraries not found (nothing was run):" "$missing" |
    tee -a "$work/preflight.log"
  fail "preflight failed: install or bundle the libraries above"
fi
echo "preflight: every binary in .gpu/bin and .gpu/tests finds its libraries" |
  tee -a "$work/preflight.log"
# What the host itself must provide, which a missing-library report elsewhere points back to.
host_libraries=$(for binary in "${binaries[@]}"; do ldd "$binary" 2>/dev/null || true; done |
  awk -v bundle="${bundle_dir:-/nonexistent}/" '$2 == "=>" && $3 ~ /^\// && index($3, bundle) != 1 {
    print $1 }' | sort -u | tr '\n' ' ' | sed 's/ $//')
echo "preflight: libraries from the host, not the bundle: $host_libraries" |
  tee -a "$work/preflight.log"
{
  echo "LD_LIBRARY_PATH=${LD_LIBRARY_PATH:-}"
  for binary in "${binaries[@]}"; do
    echo "== ldd ${binary#"$root"/}"
    ldd "$binary" 2>&1 || true
  done
} >>"$work/preflight.log"
# The comparison is optional in the build (STRATA_CUDNN_BENCH; gpu_pack.sh builds it): the loader's
# library name is in `bench` only where it is built in.
if [[ $mode == bench || $mode == all ]]; then
  if ! grep -qa 'libcudnn\.so\.9' "$gpu_dir/bin/bench"; then
    echo "preflight: bench was built without the cuDNN comparison: bench attention will time" \
      "Strata alone" | tee -a "$work/preflight.log"
  elif ! cudnn_found; then
    echo "preflight: libcudnn.so.9 not found: bench attention will time Strata alone" |
      tee -a "$work/preflight.log"
  fi
fi
if [[ $mode == quick || $mode == all ]]; then
  command -v mpirun >/dev/null || fail "preflight: mpirun not found (the bundle provides it)"
  # Launching alone (no MPI_Init): catches a missing launcher agent or consent to run as root.
  if ! mpi_output=$(timeout -k 5 60 mpirun --oversubscribe -np 2 true 2>&1); then
    printf '%s\n' "preflight: warning: 'mpirun -np 2 true' failed; the MPI tests will too:" \
      "$mpi_output" | tee -a "$work/preflight.log"
  fi
fi

# --- Steps --------------------------------------------------------------------------------------
start_all=$SECONDS
steps_run=0
steps_failed=0
failed_steps=()
step_names=() step_notes=()  # every step and its outcome, for the table rows at the end
publish() {  # copies the summary and packs the logs into LOG_DIR (after every step)
  cp "$summary" "$log_dir/summary.txt"
  tar czf "$log_dir/gpu_logs.tgz.part" -C "$(dirname "$work")" gpu_logs
  mv "$log_dir/gpu_logs.tgz.part" "$log_dir/gpu_logs.tgz"
}
publish  # the preflight's log, in case the job is stopped during the first step
step() {  # step NAME COMMAND...: runs it under the time limit, logs it, adds its summary line
  local name=$1 log=$work/$1.log
  shift
  local left=$((total_limit - (SECONDS - start_all)))
  local limit=$((left < step_limit ? left : step_limit))
  steps_run=$((steps_run + 1))
  if ((limit <= 0)); then
    steps_failed=$((steps_failed + 1))
    step_names+=("$name") step_notes+=("not run")
    printf '%-34s exit   -      -  not run: TOTAL_LIMIT %ss spent\n' "$name" "$total_limit" |
      tee -a "$summary"
    publish
    return 0
  fi
  local start=$SECONDS status=0
  echo "\$ ${*#"$root"/}" >"$log"
  timeout -k 10 "$limit" "$@" >>"$log" 2>&1 || status=$?
  local seconds=$((SECONDS - start)) note=""
  # timeout exits 124 when its TERM ended the step, 137 when its KILL had to (10 s later).
  if ((status == 124 || (status == 137 && seconds >= limit))); then
    note="TIMEOUT after ${limit}s"
  elif ((status == 77)); then
    note="skipped: no usable CUDA device"  # cuda_test_main.cpp's code
  elif ((status > 128)); then
    note="FAILED: signal $((status - 128))"  # 4 SIGILL, 6 SIGABRT, 9 SIGKILL, 11 SIGSEGV
  elif ((status != 0)); then
    note="FAILED"
  fi
  if [[ $name == bench_* ]]; then
    local json
    json=$(grep '^{' "$log" | paste -sd ' ' || true)  # every JSON line (PyTorch prints 2)
    note="${note:+$note }${json:-(no JSON line)}"
  fi
  if ((status != 0)); then
    steps_failed=$((steps_failed + 1))
    failed_steps+=("$name")
  fi
  local outcome=${note%% *}
  outcome=${outcome%:}
  [[ $name == bench_* && $status == 0 ]] && outcome=""
  step_names+=("$name") step_notes+=("${outcome:-passed}")
  printf '%-34s exit %3d  %4ds  %s\n' "$name" "$status" "$seconds" "$note" | tee -a "$summary"
  publish
}

# Kernel tests: one process each, no MPI launch (the ones sanitize mode checks).
kernel_tests=()
for test in "$gpu_dir"/tests/*_test; do
  case $(basename "$test") in
    cuda_layouts_test | nccl_communicator_test) ;;
    *) kernel_tests+=("$test") ;;
  esac
done
if [[ -n ${TESTS:-} ]]; then  # only the named kernel tests, in the given order
  kernel_tests=()
  for name in $TESTS; do kernel_tests+=("$gpu_dir/tests/$name"); done
fi
if [[ $mode == quick || $mode == all ]]; then
  for test in "${kernel_tests[@]}"; do step "test_$(basename "$test")" "$test"; done
  # The NCCL communicator runs a lone MPI_Init; cuda_layouts_test trains every layout under
  # mpirun: the slowest, so last.
  for name in nccl_communicator_test cuda_layouts_test; do
    [[ $name == cuda_layouts_test && ${LAYOUTS:-1} == 0 ]] && continue
    [[ -x $gpu_dir/tests/$name ]] && step "test_$name" "$gpu_dir/tests/$name"
  done
fi
if [[ $mode == run || $mode == all ]]; then
  # device=cuda: a run that cannot use the GPU fails rather than training on the CPU.
  runs=$(dirname "$work")/runs
  data=$gpu_dir/data/fortunes
  fortunes=(configs/fortunes.yaml --set device=cuda --set run.dir="$runs"
    --set data.train="$data/train" --set data.val="$data/val"
    --set data.tokenizer="$data/tokenizer.model")
  compare=(env -u LD_LIBRARY_PATH python3 "$root/scripts/compare_runs.py")
  step run_fortunes_fp32_20 "$gpu_dir/bin/train" "${fortunes[@]}" --set run.name=fp32_20 \
    --overwrite --set train.steps=20 --set train.log_every=1 --set precision.compute=fp32
  cp "$runs/fp32_20/metrics.jsonl" "$work/fp32_20.metrics.jsonl" 2>/dev/null || true
  step compare_fp32_20_losses "${compare[@]}" losses "$gpu_dir/ref/fp32_20.metrics.jsonl" \
    "$runs/fp32_20/metrics.jsonl" --steps 20 --tolerance 1e-4
  step run_fortunes_bf16_400 "$gpu_dir/bin/train" "${fortunes[@]}" --set run.name=bf16_400 \
    --overwrite --set precision.compute=bf16
  cp "$runs/bf16_400/metrics.jsonl" "$work/bf16_400.metrics.jsonl" 2>/dev/null || true
  step compare_bf16_400_val_loss "${compare[@]}" val_loss "$gpu_dir/ref/fp32_400.metrics.jsonl" \
    "$runs/bf16_400/metrics.jsonl" --tolerance 0.01
fi
if [[ $mode == sanitize ]]; then
  for tool in ${SANITIZE_TOOLS:-memcheck racecheck}; do
    for test in "${kernel_tests[@]}"; do
      step "${tool}_$(basename "$test")" compute-sanitizer --tool "$tool" --error-exitcode 1 \
        --print-limit 20 "$test"
    done
  done
fi
if [[ $mode == profile ]]; then
  command -v ncu >/dev/null || fail "profile: ncu (Nsight Compute) not found"
  model=${PROFILE_MODEL:-124m}
  step "profile_train_$model" ncu --metrics gpu__time_duration.sum --csv \
    --log-file "$work/ncu_$model.csv" "$gpu_dir/bin/bench" train \
    --config "configs/gpt2_$model.yaml" --set device=cuda --set train.micro_batch=8 \
    --set recompute=none --warmup 1 --steps "${PROFILE_STEPS:-2}"
  step "profile_summary_$model" env -u LD_LIBRARY_PATH python3 "$root/scripts/kernel_profile.py" \
    "$work/ncu_$model.csv" --top 40
  cat "$work/profile_summary_$model.log" >>"$summary"
fi
if [[ $mode == bench || $mode == all ]]; then
  for dtype in bf16 fp16 fp32; do
    step "bench_attention_$dtype" "$gpu_dir/bin/bench" attention --dtype "$dtype"
  done
  # The tile kernels the register kernels replace, for the same figures side by side.
  for dtype in bf16 fp16; do
    step "bench_attention_${dtype}_tiles" env STRATA_ATTENTION_KERNELS=tiles \
      "$gpu_dir/bin/bench" attention --dtype "$dtype"
  done
  # device=cuda: a run that cannot use the GPU fails rather than timing the CPU. Each Strata
  # figure is followed by PyTorch's on the same model and card (tools/bench_torch.py: eager and
  # torch.compile, bf16 autocast, SDPA, fused AdamW), with the host's own python3 and libraries.
  # No recomputation by default (the configs' 350M-1.5B recompute), so that both do the same work.
  # The Llama-style configs (RMSNorm, SwiGLU, RoPE, grouped-query attention, no biases, untied
  # head) the same way: bench_torch.py builds that block from the config's model keys.
  bench_models=()
  for model in ${BENCH_MODELS-124m 350m 774m 1.5b}; do bench_models+=("$model:gpt2_$model"); done
  for model in ${BENCH_LLAMA_MODELS-125m 350m 1b}; do bench_models+=("llama_$model:llama_$model"); done
  for entry in ${bench_models[@]+"${bench_models[@]}"}; do
    model=${entry%%:*} config="configs/${entry#*:}.yaml"
    step "bench_train_$model" "$gpu_dir/bin/bench" train --config "$config" \
      --set device=cuda --set train.micro_batch=${BENCH_MICRO_BATCH:-8} \
      --set recompute=${BENCH_RECOMPUTE:-none} --steps 20
    if [[ ${BENCH_TORCH:-1} == 1 ]]; then
      step "bench_torch_$model" env -u LD_LIBRARY_PATH PYTHONUNBUFFERED=1 python3 \
        "$root/tools/bench_torch.py" --device cuda --config "$config" \
        --micro-batch ${BENCH_MICRO_BATCH:-8}
    fi
  done
  # FP8 (precision.fp8, tensorwise and delayed) against the bf16 figures above on the same configs
  # (MFU still counted at the bf16 peak); the default fp8_min_size leaves 124M's GEMMs in bf16.
  for model in ${BENCH_FP8_MODELS-350m 774m 1.5b llama_1b}; do
    config="configs/gpt2_$model.yaml"
    [[ $model == llama_* ]] && config="configs/$model.yaml"
    for recipe in tensorwise delayed; do
      step "bench_train_${model}_fp8_$recipe" "$gpu_dir/bin/bench" train --config "$config" \
        --set device=cuda --set train.micro_batch="${BENCH_MICRO_BATCH:-8}" \
        --set recompute="${BENCH_RECOMPUTE:-none}" --set precision.compute=bf16 \
        --set precision.fp8="$recipe" --steps 20
    done
  done
fi

# --- Report -------------------------------------------------------------------------------------
# The rows of docs/PERFORMANCE.md's table "CUDA backend: what has run on a GPU", one per job:
# | date | card | commit | job | what ran | result |
table_rows() {
  local date card commit job i
  date=$(date -u +%Y-%m-%d)
  card=$(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null | sort |
    uniq -c | awk '{ n = $1; sub(/^ *[0-9]+ /, ""); split($0, f, ", ")
      printf "%s%s%s, driver %s", (NR > 1 ? "; " : ""), (n > 1 ? n " × " : ""), f[1], f[2] }') ||
    true
  commit=${STRATA_COMMIT:-$(cat "$gpu_dir/commit" 2>/dev/null || true)}
  [[ -n $commit ]] || commit=$(git -C "$root" rev-parse --short HEAD 2>/dev/null) || commit=unknown
  for job in quick run bench sanitize profile; do
    local ran=() failed=()
    for i in "${!step_names[@]}"; do
      case ${step_names[$i]} in
        test_*) [[ $job == quick ]] || continue ;;
        run_* | compare_*) [[ $job == run ]] || continue ;;
        bench_*) [[ $job == bench ]] || continue ;;
        memcheck_* | racecheck_* | *check_*) [[ $job == sanitize ]] || continue ;;
        profile_*) [[ $job == profile ]] || continue ;;
        *) continue ;;
      esac
      ran+=("${step_names[$i]}")
      [[ ${step_notes[$i]} == passed ]] || failed+=("${step_names[$i]} (${step_notes[$i]})")
    done
    ((${#ran[@]})) || continue
    local result="passed"
    ((${#ran[@]} == 1)) || result="all ${#ran[@]} passed"
    ((${#failed[@]} == 0)) ||
      result="${#failed[@]} of ${#ran[@]} not passed: $(printf '%s, ' "${failed[@]}")"
    # shellcheck disable=SC2016 # the backticks are Markdown's, around the job's name
    printf '| %s | %s | %s | `%s` | %s | %s |\n' "$date" "${card:-unknown (no nvidia-smi)}" \
      "$commit" "$job" "$(printf '%s, ' "${ran[@]}" | sed 's/, $//')" "${result%, }"
  done
}
echo "# $steps_run steps, $steps_failed not passed, $((SECONDS - start_all))s" >>"$summary"
{
  echo "# rows for docs/PERFORMANCE.md, \"CUDA backend: what has run on a GPU\":"
  table_rows
} >>"$summary"
publish
for name in "${failed_steps[@]}"; do
  echo "=== $name: last 20 lines"
  tail -n 20 "$work/$name.log"
done
echo "=== summary ($log_dir/summary.txt; every log in $log_dir/gpu_logs.tgz)"
cat "$summary"
((steps_failed == 0))
