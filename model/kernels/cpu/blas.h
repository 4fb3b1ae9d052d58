// The CPU backend's GEMMs (row-major, float for training and double for finite-difference
// gradient checks) on a BLAS library chosen when the process first multiplies, from the CPU's
// feature flags, never from its model name:
//
//   onednn    oneDNN's dnnl_sgemm (Debian's libdnnl2, OpenMP runtime): JIT kernels for the widest
//             vector ISA the CPU reports (AVX2, AVX-512 ...). The default where it loads.
//   openblas  OpenBLAS's OpenMP build. Its own detection keys on the CPU model number and takes a
//             masked or unknown model (common on cloud VMs) for a 2004 Pentium 4 ("Prescott", SSE3
//             kernels); so unless OPENBLAS_CORETYPE is set, it is set from the
//             feature flags (openblas_core_for) before the library is loaded, which is why it is
//             loaded with dlopen and not linked.
//   blis      BLIS's OpenMP build (its kernels are chosen from the feature flags too).
//
// STRATA_BLAS=onednn|openblas|blis asks for one (an error if it cannot be loaded). AddressSanitizer
// builds default to OpenBLAS: LeakSanitizer's exit-time scan crashes on oneDNN's JIT worker
// threads ("Tracer caught signal 11"), which says nothing about our code. Every library
// is an OpenMP build on the same libgomp as the element-wise loops: one thread pool per rank, so
// GEMMs and loops never spin against each other. Double GEMMs always run on OpenBLAS (oneDNN has
// none).
#pragma once

#include <string>

namespace strata::cpu {

// C (m, n) = alpha * op(A) · op(B) + beta * C, row-major with leading dimensions.
void gemm(bool trans_a, bool trans_b, int m, int n, int k, float alpha, const float* a, int lda,
          const float* b, int ldb, float beta, float* c, int ldc);
void gemm(bool trans_a, bool trans_b, int m, int n, int k, double alpha, const double* a, int lda,
          const double* b, int ldb, double beta, double* c, int ldc);

#if defined(__SANITIZE_ADDRESS__)
inline constexpr bool kAddressSanitizerBuild = true;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
inline constexpr bool kAddressSanitizerBuild = true;
#else
inline constexpr bool kAddressSanitizerBuild = false;
#endif
#else
inline constexpr bool kAddressSanitizerBuild = false;
#endif
// The library taken when STRATA_BLAS is unset and it loads (else OpenBLAS).
inline constexpr const char* kDefaultBlas = kAddressSanitizerBuild ? "openblas" : "onednn";

// What the float GEMMs run on (loads the library if nothing has yet).
struct BlasLibrary {
  std::string name;       // "onednn", "openblas" or "blis"
  std::string version;    // e.g. "2.6.3"
  std::string threading;  // "OpenMP", "pthreads" or "sequential"
  std::string kernels;    // e.g. "avx512_core_bf16" (oneDNN's ISA), "SkylakeX" (OpenBLAS's core)
  std::string describe() const;  // "onednn 2.6.3 (OpenMP, avx512_core_bf16 kernels)"
};
const BlasLibrary& blas_library();

// The threads GEMMs use (the OpenMP count covers oneDNN and BLIS; OpenBLAS is told too).
void blas_set_threads(int threads);

// The vector units that decide the kernels.
struct CpuFeatures {
  bool avx = false, avx2 = false, fma = false;
  bool avx512f = false, avx512bw = false, avx512dq = false, avx512vl = false, avx512cd = false;
  static CpuFeatures of_this_cpu();
};
// OpenBLAS's core type for CPUs with `features`: "SkylakeX" (AVX-512 F/CD/BW/DQ/VL), "Haswell"
// (AVX2 and FMA), "Sandybridge" (AVX), or "" (leave OpenBLAS's own choice).
std::string openblas_core_for(const CpuFeatures& features);

}  // namespace strata::cpu
