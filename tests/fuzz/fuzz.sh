#!/usr/bin/env bash
# Fuzzes the readers of user input (tests/fuzz): builds the libFuzzer targets with clang under
# ASan + UBSan into build-fuzz/ (through the compiler cache, scripts/compiler_cache.sh), then runs
# each for FUZZ_SECONDS (default 10) starting from its seeds in tests/fuzz/corpus/<target>/, and
# prints executions, coverage and findings per target.
# A finding stops the script with a non-zero status; the input that caused it is saved as
# build-fuzz/findings/<target>/crash-* (copy it into tests/fuzz/corpus/<target>/ as finding-<what>
# once fixed, so that the fuzz.replay ctests keep it fixed). Needs clang and its runtimes
# (scripts/setup.sh clang libclang-rt-14-dev libomp-14-dev). FUZZ_TARGETS picks targets.
set -euo pipefail
cd "$(dirname "$0")/../.."
seconds=${FUZZ_SECONDS:-10}
targets=${FUZZ_TARGETS:-config documents shard shard_fields checkpoint checkpoint_fields store_record handshake}

# shellcheck source=scripts/compiler_cache.sh
source scripts/compiler_cache.sh
CC=clang CXX=clang++ cmake -S . -B build-fuzz -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DSTRATA_FUZZ=ON -DSTRATA_CUDA=OFF -DSTRATA_NATIVE=OFF "${compiler_cache_args[@]}" >/dev/null
# shellcheck disable=SC2046
ninja -C build-fuzz $(for t in $targets; do echo "${t}_fuzzer"; done)

# Fast unwinding on every allocation (4-5x the executions of the slow unwinder) leaves stacks that
# the leak suppressions of HDF5's and OpenMP's lifetime allocations cannot match, so leaks are not
# checked here: the sanitizer build's ctest replays the corpus with LeakSanitizer on full stacks.
export ASAN_OPTIONS="fast_unwind_on_malloc=1:detect_leaks=0"
export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1"
export OMP_NUM_THREADS=1
status=0
printf '%-18s %12s %8s %8s %s\n' target executions cov corpus findings
for t in $targets; do
  work=build-fuzz/corpus/$t findings=build-fuzz/findings/$t log=build-fuzz/fuzz-$t.log
  mkdir -p "$work" "$findings"
  # -rss_limit_mb: an input that makes a reader allocate gigabytes is a finding too.
  if build-fuzz/bin/"${t}"_fuzzer -max_total_time="$seconds" -rss_limit_mb=2048 -timeout=30 -detect_leaks=0 \
    -artifact_prefix="$findings/" -print_final_stats=1 "$work" tests/fuzz/corpus/"$t" >"$log" 2>&1; then
    found=none
  else
    found="$(ls "$findings" | tr '\n' ' ') (see $log)"
    status=1
  fi
  executions=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
  cov=$(grep -o 'cov: [0-9]*' "$log" | tail -1 | cut -d' ' -f2)
  corpus=$(ls "$work" | wc -l)
  printf '%-18s %12s %8s %8s %s\n' "$t" "${executions:-?}" "${cov:-?}" "$corpus" "$found"
done
exit $status
