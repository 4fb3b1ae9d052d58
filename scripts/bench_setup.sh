# Sourced by the fortunes benchmarks (scripts/bench_*.sh) once BUILD_DIR is set: builds train and
# tokenize there, tokenizes the corpus if needed, lets Open MPI run as root, makes a scratch
# directory $work (removed on exit) and defines bench_header, which prints the line that dates a
# result: time, commit, CPU and the benchmark's own settings (its arguments).
PYTHON=/usr/bin/python3
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1

ninja -C "$BUILD_DIR" train tokenize >/dev/null
bash scripts/prepare_fortunes.sh

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

bench_header() {
  echo "# $(date -u +%Y-%m-%dT%H:%MZ) commit $(git rev-parse --short HEAD)" \
    "cpu '$(lscpu | sed -n 's/^Model name: *//p')' nproc $(nproc --all) $*"
}
