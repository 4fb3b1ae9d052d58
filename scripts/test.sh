#!/usr/bin/env bash
# The full test suite: installs what is missing (with the Python test environment .venv-test),
# builds, runs every ctest (unit, mpi, python; cuda tests report skipped without a GPU).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
bash scripts/setup_python.sh
bash scripts/build.sh
ctest --test-dir build --output-on-failure "$@"
