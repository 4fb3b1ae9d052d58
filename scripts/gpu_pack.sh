#!/usr/bin/env bash
# Builds the CUDA backend (Release, sm_90a) into build-gpu/ and copies what validating it on a GPU
# host needs into .gpu/: the tools `train` and `bench`, and the `cuda` tests (tests/cuda/*_test.cu,
# tests/mpi/cuda_*_test.cpp), plus the libraries the runtime-library bundle lacks (.gpu/lib), and
# packs it as .gpu.tar.gz. scripts/gpu_check.sh runs them there, from the repository root.
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
cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DSTRATA_CUDA=ON -DSTRATA_NATIVE=OFF \
  -DSTRATA_SANITIZE=OFF -DCMAKE_CUDA_ARCHITECTURES=90a \
  -DSTRATA_CUDNN_BENCH="${STRATA_CUDNN_BENCH:-ON}" >/dev/null
# Only what .gpu/ holds: the CPU unit and MPI tests are not needed on the GPU host.
ninja -C build-gpu train bench "${tests[@]}"
rm -rf .gpu
mkdir -p .gpu/bin .gpu/tests
cp build-gpu/bin/train build-gpu/bin/bench .gpu/bin/
for name in "${tests[@]}"; do
  cp "build-gpu/tests/$name" .gpu/tests/
done
strip .gpu/bin/* .gpu/tests/*

# Libraries the binaries load here that the runtime-library bundle lacks (HDF5's libcurl4 and
# OpenSSL, zstd, udev, quadmath... on Debian 12): copied into .gpu/lib, which gpu_check.sh puts on
# the search path only when the GPU host lacks a library. Never glibc, libstdc++/libgcc_s or the
# CUDA stack (the GPU host has its own, perhaps newer, which must win). Without the bundle's
# folder (BUNDLE_DIR, default .bundle, from the bundle script run first) every other library is
# copied.
bundle_root=${BUNDLE_DIR:-.bundle}/root
[[ -d $bundle_root ]] || echo "gpu_pack: no $bundle_root: .gpu/lib gets every non-system library"
mkdir -p .gpu/lib
ldd .gpu/bin/* .gpu/tests/* | awk '$2 == "=>" && $3 ~ /^\// { print $1, $3 }' | sort -u |
  while read -r name path; do
    case $name in
      libc.so.* | libm.so.* | libpthread.so.* | libdl.so.* | librt.so.* | libresolv.so.* | \
        libutil.so.* | ld-linux* | libstdc++.so.* | libgcc_s.so.*) continue ;;
      libcuda.so.* | libcudart.so.* | libcublas*.so.* | libcudnn*.so.* | libnccl.so.* | \
        libnv*) continue ;;
    esac
    if [[ -d $bundle_root && -n $(find "$bundle_root" -name "$name" -print -quit) ]]; then
      continue
    fi
    cp -L "$path" .gpu/lib/
  done
# Compressed for the trip (the CUDA code compresses about 3×); gpu_check.sh unpacks it.
tar czf .gpu.tar.gz .gpu
echo "gpu_pack: .gpu/ holds ${#tests[@]} tests, 2 tools and $(find .gpu/lib -type f | wc -l)" \
  "libraries, $(du -sh .gpu | cut -f1), .gpu.tar.gz $(du -sh .gpu.tar.gz | cut -f1); take" \
  ".gpu.tar.gz to the GPU host and run from the repository root: bash scripts/gpu_check.sh" \
  "quick LOG_DIR"
