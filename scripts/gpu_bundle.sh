#!/usr/bin/env bash
# Makes the runtime-library bundle: the Debian libraries Strata's binaries load (yaml-cpp, HDF5,
# Open MPI, SentencePiece, OpenBLAS (loaded at run time) and everything they load in turn) and Open MPI's launcher, so
# that a GPU host with only its driver and CUDA stack can run what scripts/gpu_pack.sh packs.
#   usage: bash scripts/gpu_bundle.sh [DIR]     (default .bundle: DIR/ and DIR.tar.gz)
# DIR/root mirrors the absolute paths of this machine (root/usr/lib/..., root/usr/bin/orterun),
# so that Open MPI, relocated by OPAL_PREFIX, finds its plugins, help files and orted where its
# configuration expects them relative to its prefix. DIR/env.sh, when sourced, puts the bundle
# first on PATH and LD_LIBRARY_PATH and sets the relocation variables (docs/PERFORMANCE.md, "CUDA
# backend").
# Left to the host: glibc, libstdc++/libgcc_s (the host's own must win: a newer one serves our
# binaries, an older one would fail the preflight's ldd) and the CUDA stack (driver, runtime,
# cuBLASLt, NCCL, cuDNN), which must match the host's driver.
# The binaries scanned are build-gpu/'s when it exists, else build/'s; Open MPI's plugins are
# scanned too, since mpirun and MPI_Init load them by dlopen, which ldd does not see.
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=scripts/loaded_libraries.sh
source scripts/loaded_libraries.sh
dir=${1:-.bundle}
multiarch=$(gcc -print-multiarch 2>/dev/null || echo x86_64-linux-gnu)
lib=/usr/lib/$multiarch
command -v orterun >/dev/null || {
  echo "error: Open MPI's launcher (orterun) is not installed: run scripts/setup.sh" >&2
  exit 1
}
binaries=()
for build in build-gpu build; do
  if [[ -d $build/bin ]]; then
    for binary in "$build"/bin/train "$build"/bin/bench "$build"/tests/*_test; do
      [[ -x $binary ]] && binaries+=("$binary")
    done
    break
  fi
done
((${#binaries[@]})) || {
  echo "error: no built binaries in build-gpu/ or build/: build first (scripts/gpu_pack.sh)" >&2
  exit 1
}

rm -rf "$dir" "$dir.tar.gz"
root=$dir/root
mkdir -p "$root"
copy() {  # copy PATH...: each path (resolved when a link) to the same absolute path under root/
  local path
  for path in "$@"; do
    mkdir -p "$root$(dirname "$path")"
    cp -L "$path" "$root$path"
  done
}
# Open MPI's trees: the MCA plugins (Pkglibdir), the help texts (Pkgdatadir) and PMIx's library
# and plugins, links kept as links. Left out: headers and static archives, and the plugins of the
# network stacks that one host never uses (UCX, libfabric, PSM, verbs) and of OpenSHMEM, whose
# libraries (and ICU, X11 and OpenCL through hwloc's own plugins) would treble the bundle.
for tree in "$lib/openmpi/lib" "$lib/pmix2" /usr/share/openmpi /etc/openmpi; do
  mkdir -p "$root$(dirname "$tree")"
  cp -a "$tree" "$root$tree"
done
find "$root" \( -name '*.a' -o -name '*.la' -o -name include \) -prune -exec rm -rf {} +
find "$root$lib/openmpi/lib/openmpi3" -regextype egrep \
  -regex '.*/mca_[a-z]+_(ucx|ofi|psm|psm2|openib|usnic)\.so' -delete
find "$root$lib/openmpi/lib/openmpi3" -regextype egrep \
  -regex '.*/mca_(spml|sshmem|scoll|atomic|memheap)_.*\.so' -delete
copy /usr/bin/orterun /usr/bin/orted
ln -s orterun "$root/usr/bin/mpirun"
ln -s orterun "$root/usr/bin/mpiexec"

# The CPU GEMMs' library is loaded with dlopen (model/kernels/cpu/blas.h), which ldd does not see:
# OpenBLAS's OpenMP build travels (oneDNN, 40 MB, would not fit beside the binaries; without it
# the binaries fall back to OpenBLAS), found on the host by its name in the bundle's folder.
blas=$lib/openblas-openmp/libopenblas.so.0
[[ -e $blas ]] || {
  echo "error: $blas is missing: run scripts/setup.sh" >&2
  exit 1
}
mkdir -p "$root$lib"
cp -L "$blas" "$root$lib/libopenblas.so.0"

# Every shared library the binaries, the launcher and the plugins load, except the host's own.
plugins=$(find "$root$lib/openmpi" "$root$lib/pmix2" -name '*.so*' -type f)
# shellcheck disable=SC2086
loaded_libraries "${binaries[@]}" "$blas" /usr/bin/orterun /usr/bin/orted $plugins |
  while read -r name path; do
    # Libraries by their name in the multiarch folder, whatever folder ldd found them in.
    mkdir -p "$root$lib"
    [[ -e $root$lib/$name ]] || cp -L "$path" "$root$lib/$name"
  done

cat >"$dir/env.sh" <<EOF
# Sourced by scripts/gpu_check.sh: the bundle's libraries and Open MPI first (made by
# scripts/gpu_bundle.sh on $(. /etc/os-release && echo "$PRETTY_NAME"), $(date -u +%Y-%m-%d)).
bundle=\$(cd "\$(dirname "\${BASH_SOURCE[0]}")" && pwd)
export PATH="\$bundle/root/usr/bin:\$PATH"
export LD_LIBRARY_PATH="\$bundle/root$lib:\$bundle/root$lib/openmpi/lib:\$bundle/root$lib/pmix2/lib\${LD_LIBRARY_PATH:+:\$LD_LIBRARY_PATH}"
# Open MPI was configured with /usr as its prefix: OPAL_PREFIX moves it. PMIx (its own prefix) is
# pointed at its plugins directly, without which it prints a warning at every launch.
export OPAL_PREFIX="\$bundle/root/usr" OPAL_LIBDIR="\$bundle/root$lib/openmpi/lib"
export PMIX_MCA_mca_base_component_path="\$bundle/root$lib/pmix2/lib/pmix"
# A host with a PMIx of its own at the same path (Ubuntu 24.04's) offers its plugins too, which
# fail to load into ours: harmless, but a warning at every launch.
export PMIX_MCA_pmix_mca_base_component_show_load_errors=0 PMIX_MCA_pcompress_base_silence_warning=1
export OMPI_MCA_mca_base_param_files="\$bundle/root/etc/openmpi/openmpi-mca-params.conf"
# One host, shared memory between ranks: no network stacks (UCX, libfabric, verbs) are tried.
export OMPI_MCA_pml=ob1 OMPI_MCA_btl=self,vader,tcp OMPI_MCA_mtl=^ofi,psm,psm2 OMPI_MCA_osc=^ucx
EOF
tar czf "$dir.tar.gz" -C "$(dirname "$dir")" "$(basename "$dir")"
echo "gpu_bundle: $dir holds $(find "$root" -type f -name '*.so*' | wc -l) libraries and" \
  "plugins, $(du -sh "$dir" | cut -f1); $dir.tar.gz $(du -sh "$dir.tar.gz" | cut -f1)"
