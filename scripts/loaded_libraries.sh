# Sourced by scripts/gpu_pack.sh and scripts/gpu_bundle.sh: the shared libraries that binaries load
# here and that travel with them to a GPU host.
#   loaded_libraries BINARY...   prints "NAME PATH" per library, once each, leaving out what the
#                                GPU host must provide itself: glibc, libstdc++/libgcc_s (its own,
#                                perhaps newer, must win) and the CUDA stack (driver, runtime,
#                                cuBLAS(Lt), cuDNN, NCCL: they must match the host's driver).
loaded_libraries() {
  ldd "$@" 2>/dev/null | awk '$2 == "=>" && $3 ~ /^\// { print $1, $3 }' | sort -u |
    while read -r name path; do
      case $name in
        libc.so.* | libm.so.* | libpthread.so.* | libdl.so.* | librt.so.* | libresolv.so.* | \
          libutil.so.* | ld-linux* | libstdc++.so.* | libgcc_s.so.*) continue ;;
        libcuda.so.* | libcudart.so.* | libcublas*.so.* | libcudnn*.so.* | libnccl.so.* | \
          libnv*) continue ;;
      esac
      echo "$name $path"
    done
}
