#!/usr/bin/env bash
# Configures and builds Strata (Release) into ./build through the compiler cache
# (scripts/compiler_cache.sh); extra arguments go to cmake. STRATA_TARGETS, when set, builds only
# those targets (scripts/demo.sh builds the tools it runs, not the tests).
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=scripts/compiler_cache.sh
source scripts/compiler_cache.sh
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release "${compiler_cache_args[@]}" "$@" >/dev/null
# shellcheck disable=SC2086
ninja -C build ${STRATA_TARGETS:-}
