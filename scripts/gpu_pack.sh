#!/usr/bin/env bash
# Builds the CUDA backend (Release, sm_90a) into build-gpu/ and copies what validating it on a GPU
# host needs into .gpu/: the tools `train` and `bench`, and the `cuda` tests (tests/cuda/*_test.cu,
# tests/mpi/cuda_*_test.cpp). scripts/gpu_check.sh runs them there, from the repository root.
#   usage: bash scripts/gpu_pack.sh
# The GPU host must have the CUDA runtime, cuBLASLt and NCCL of the toolkit it is built with (and
# cuDNN 9 for `bench attention`'s comparison); Debian's libraries (Open MPI, HDF5, yaml-cpp,
# OpenBLAS, SentencePiece) travel separately, as a runtime-library bundle (docs/PERFORMANCE.md).
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
cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DSTRATA_CUDA=ON -DSTRATA_NATIVE=OFF \
  -DSTRATA_SANITIZE=OFF -DCMAKE_CUDA_ARCHITECTURES=90a >/dev/null
# Only what .gpu/ holds: the CPU unit and MPI tests are not needed on the GPU host.
ninja -C build-gpu train bench "${tests[@]}"
rm -rf .gpu
mkdir -p .gpu/bin .gpu/tests
cp build-gpu/bin/train build-gpu/bin/bench .gpu/bin/
for name in "${tests[@]}"; do
  cp "build-gpu/tests/$name" .gpu/tests/
done
strip .gpu/bin/* .gpu/tests/*
echo "gpu_pack: .gpu/ holds ${#tests[@]} tests and 2 tools, $(du -sh .gpu | cut -f1);" \
  "on the GPU host, from the repository root: bash scripts/gpu_check.sh quick LOG_DIR"
