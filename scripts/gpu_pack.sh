#!/usr/bin/env bash
# Builds the CUDA backend (Release, sm_90a) into build-gpu/ (through the compiler cache,
# scripts/compiler_cache.sh) and copies what validating it on a GPU host needs into .gpu/: the
# tools `train` and `bench`, and the `cuda` tests (tests/cuda/*_test.cu, tests/mpi/cuda_*_test.cpp),
# plus the libraries the runtime-library bundle lacks (.gpu/lib), and
# packs it as .gpu.tar.gz. scripts/gpu_check.sh runs them there, from the repository root.
# The `run` job's inputs travel too: the fortunes corpus tokenized here (.gpu/data/fortunes) and
# the CPU fp32 reference runs of configs/fortunes.yaml (.gpu/ref: 20 steps and 400 steps, a loss
# line per step), computed once with this build's `train` on the CPU and kept in build-gpu/ref
# (delete it to compute them again).
#   usage: bash scripts/gpu_pack.sh
# The GPU host must have the CUDA runtime, cuBLASLt and NCCL of the toolkit it is built with (and
# cuDNN 9 for `bench attention`'s comparison, which the pack builds: STRATA_CUDNN_BENCH=ON needs
# cuDNN 9's headers here; STRATA_CUDNN_BENCH=OFF in the environment packs without it); Debian's
# libraries (Open MPI, HDF5, yaml-cpp, OpenBLAS, SentencePiece) travel separately, as a
# runtime-library bundle (docs/PERFORMANCE.md).
# Built without -march=native (STRATA_NATIVE=OFF): the GPU host's CPU may lack instructions of
# the build machine's, which would stop the binaries with SIGILL. build-gpu/ and .gpu/ are
# ignored by git, and build-gpu/ is apart from scripts/build.sh's build/.
set -euo pipefail
cd "$(dirname "$0")/.."
tests=()
for source in tests/cuda/*_test.cu tests/mpi/cuda_*_test.cpp; do
  name=$(basename "$source")
  tests+=("${name%%.*}")
done
# shellcheck source=scripts/compiler_cache.sh
source scripts/compiler_cache.sh
cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DSTRATA_CUDA=ON -DSTRATA_NATIVE=OFF \
  -DSTRATA_SANITIZE=OFF -DCMAKE_CUDA_ARCHITECTURES=90a \
  -DSTRATA_CUDNN_BENCH="${STRATA_CUDNN_BENCH:-ON}" "${compiler_cache_args[@]}" >/dev/null
# Only what .gpu/ holds: the CPU unit and MPI tests are not needed on the GPU host.
ninja -C build-gpu train bench tokenize "${tests[@]}"
rm -rf .gpu
mkdir -p .gpu/bin .gpu/tests
cp build-gpu/bin/train build-gpu/bin/bench build-gpu/bin/tokenize .gpu/bin/
for name in "${tests[@]}"; do
  cp "build-gpu/tests/$name" .gpu/tests/
done
strip .gpu/bin/* .gpu/tests/*
# The commit the binaries were built from, for the rows gpu_check.sh prints for docs/PERFORMANCE.md
# (the GPU host's copy of the repository may be no git checkout). "+" marks uncommitted changes.
commit=$(git rev-parse --short HEAD 2>/dev/null || echo unknown)
[[ $commit == unknown || -z $(git status --porcelain --untracked-files=no) ]] || commit+="+"
echo "$commit" >.gpu/commit

# Libraries the binaries load here that the runtime-library bundle lacks (HDF5's libcurl4 and
# OpenSSL, zstd, udev, quadmath... on Debian 12): copied into .gpu/lib, which gpu_check.sh puts on
# the search path only when the GPU host lacks a library. Never glibc, libstdc++/libgcc_s or the
# CUDA stack (the GPU host has its own, perhaps newer, which must win). Without the bundle's
# folder (BUNDLE_DIR, default .bundle, from the bundle script run first) every other library is
# copied.
bundle_root=${BUNDLE_DIR:-.bundle}/root
[[ -d $bundle_root ]] || echo "gpu_pack: no $bundle_root: .gpu/lib gets every non-system library"
mkdir -p .gpu/lib
# shellcheck source=scripts/loaded_libraries.sh
source scripts/loaded_libraries.sh
loaded_libraries .gpu/bin/* .gpu/tests/* |
  while read -r name path; do
    if [[ -d $bundle_root && -n $(find "$bundle_root" -name "$name" -print -quit) ]]; then
      continue
    fi
    cp -L "$path" .gpu/lib/
  done
# The real runs' corpus and CPU references (gpu_check.sh run). The reference runs train as the
# README's main job does (2 data-parallel ranks), with a loss line every step; on OpenBLAS's
# AVX-512 kernels where the CPU has them, whatever model name it reports (Debian's OpenBLAS 0.3.21
# otherwise falls back to SSE3 on CPUs whose model it does not know).
STRATA_BIN_DIR=build-gpu/bin bash scripts/prepare_fortunes.sh
mkdir -p .gpu/data/fortunes .gpu/ref
cp -r data/fortunes/train data/fortunes/val data/fortunes/tokenizer.model .gpu/data/fortunes/
coretype=Haswell
grep -qw avx512f /proc/cpuinfo && coretype=SkylakeX
for reference in fp32_20:20 fp32_400:400; do
  name=${reference%%:*}
  steps=${reference##*:}
  if [[ ! -f build-gpu/ref/$name.metrics.jsonl ]]; then
    echo "gpu_pack: computing the CPU reference $name (fortunes, $steps steps)"
    rm -rf "build-gpu/ref-runs/$name"
    OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OPENBLAS_CORETYPE=$coretype \
      OMP_WAIT_POLICY=PASSIVE mpirun --oversubscribe -np 2 build-gpu/bin/train \
      configs/fortunes.yaml --set device=cpu --set precision.compute=fp32 \
      --set run.dir=build-gpu/ref-runs --set run.name="$name" --set train.steps="$steps" \
      --set train.log_every=1 >"build-gpu/ref-runs-$name.log"
    mkdir -p build-gpu/ref
    cp "build-gpu/ref-runs/$name/metrics.jsonl" "build-gpu/ref/$name.metrics.jsonl"
  fi
  cp "build-gpu/ref/$name.metrics.jsonl" .gpu/ref/
done
# Compressed for the trip (the CUDA code compresses about 3×); gpu_check.sh unpacks it.
tar czf .gpu.tar.gz .gpu
echo "gpu_pack: .gpu/ holds ${#tests[@]} tests, 3 tools, the fortunes corpus and references and $(find .gpu/lib -type f | wc -l)" \
  "libraries, $(du -sh .gpu | cut -f1), .gpu.tar.gz $(du -sh .gpu.tar.gz | cut -f1); take" \
  ".gpu.tar.gz to the GPU host and run from the repository root: bash scripts/gpu_check.sh" \
  "quick LOG_DIR"
