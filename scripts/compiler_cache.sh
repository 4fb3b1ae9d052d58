# The compiler cache of every build (ccache, from Debian; scripts/setup.sh installs it). Sourced
# by scripts/build.sh, .ci/run, tests/fuzz/fuzz.sh and scripts/gpu_pack.sh: it sets ccache's
# options for this clone and puts cmake's launcher arguments (C, C++ and nvcc) into the array
# compiler_cache_args.
#  - The cache lives outside the clone: $CCACHE_DIR, by default ~/.cache/strata-ccache, capped at
#    $CCACHE_MAXSIZE (default 5G; ccache evicts the least recently used entries). CI's three
#    builds of the tree (sanitizer, fuzz, Release with CUDA) take about 90 MB of it, compressed.
#  - Clones in any folder share it: base_dir is the clone's root, so ccache rewrites the paths
#    inside the clone relative to the build folder before hashing; hash_dir is off, so builds with
#    debug info (sanitizer, fuzz) do not hash the build folder either (their line tables then name
#    the folder of the clone that first compiled an object). No compile line may carry the
#    clone's path in any other form (a -D of an absolute path would miss in every other clone:
#    tests/support/test_paths.h finds the repository at run time instead).
#  - Wipe it with `ccache -C` (or remove the folder); STRATA_CCACHE=0, or no ccache on the PATH,
#    builds without it. A cold or wiped cache builds the same objects, only slower.
# shellcheck shell=bash
compiler_cache_args=()
if [[ ${STRATA_CCACHE:-1} != 0 ]] && command -v ccache >/dev/null; then
  export CCACHE_DIR=${CCACHE_DIR:-$HOME/.cache/strata-ccache}
  export CCACHE_MAXSIZE=${CCACHE_MAXSIZE:-5G}
  CCACHE_BASEDIR=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
  export CCACHE_BASEDIR
  export CCACHE_NOHASHDIR=1
  compiler_cache_args=(-DCMAKE_C_COMPILER_LAUNCHER=ccache -DCMAKE_CXX_COMPILER_LAUNCHER=ccache
                       -DCMAKE_CUDA_COMPILER_LAUNCHER=ccache)
else
  # A build folder configured with the cache before keeps its launcher in CMakeCache.txt: clear it.
  compiler_cache_args=(-UCMAKE_C_COMPILER_LAUNCHER -UCMAKE_CXX_COMPILER_LAUNCHER
                       -UCMAKE_CUDA_COMPILER_LAUNCHER)
fi
