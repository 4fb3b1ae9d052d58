#!/usr/bin/env bash
# Builds the CUDA backend (Release, sm_90a) into build-gpu/ and copies what validating it on a GPU
# host needs into .gpu/: the tools (train, bench, eval), the `cuda` tests, and gpu_check.sh. About
# 35 MB: small enough to ship to a machine that has the CUDA runtime (cudart, cuBLASLt) but must
# get Debian's libraries (Open MPI, HDF5, yaml-cpp, OpenBLAS, SentencePiece) some other way.
set -euo pipefail
cd "$(dirname "$0")/.."
cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DSTRATA_CUDA=ON \
  -DCMAKE_CUDA_ARCHITECTURES=90a >/dev/null
ninja -C build-gpu
rm -rf .gpu
mkdir -p .gpu/bin .gpu/tests
cp build-gpu/bin/train build-gpu/bin/bench build-gpu/bin/eval .gpu/bin/
for test in tests/cuda/*_test.cu tests/mpi/cuda_*_test.cpp; do
  name=$(basename "${test%.*}")
  cp "build-gpu/tests/$name" .gpu/tests/
done
strip .gpu/bin/* .gpu/tests/*
cp scripts/gpu_check.sh .gpu/
echo "gpu_pack: .gpu/ holds $(du -sh .gpu | cut -f1); on the GPU host: bash .gpu/gpu_check.sh LOG_DIR"
