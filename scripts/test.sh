#!/usr/bin/env bash
# The full test suite: installs what is missing (with the Python test environment .venv-test),
# builds, runs every ctest (unit, mpi, python; cuda tests report skipped without a GPU).
# The build always includes the CUDA backend where nvcc is found (STRATA_CUDA=AUTO, even when
# scripts/demo.sh configured ./build without it on a machine with no GPU): CUDA code must keep
# compiling with warnings as errors. Each test has a time limit (tests/CMakeLists.txt);
# scripts/test_times.sh lists the slowest afterwards.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
bash scripts/setup_python.sh
bash scripts/build.sh -DSTRATA_CUDA=AUTO
ctest --test-dir build --output-on-failure "$@"
