// The BLAS library is loaded with dlopen (see blas.h for why) and called through the few C
// entry points the backend needs, declared here from each library's documented C interface, so
// building needs none of their headers.
#include "model/kernels/cpu/blas.h"

#include <dlfcn.h>

#include <cstdint>
#include <cstdlib>
#include <mutex>
#include <vector>

#include "model/core/error.h"

namespace strata::cpu {
namespace {

// CBLAS (OpenBLAS, BLIS).
constexpr int kRowMajor = 101, kNoTrans = 111, kTrans = 112;
using CblasSgemm = void (*)(int, int, int, int, int, int, float, const float*, int, const float*,
                            int, float, float*, int);
using CblasDgemm = void (*)(int, int, int, int, int, int, double, const double*, int, const double*,
                            int, double, double*, int);
// oneDNN (dnnl.h): row-major sgemm with 'N'/'T', 64-bit sizes; a dnnl_status_t (0: success).
using DnnlSgemm = int (*)(char, char, std::int64_t, std::int64_t, std::int64_t, float, const float*,
                          std::int64_t, const float*, std::int64_t, float, float*, std::int64_t);
struct DnnlVersion {  // dnnl_version_t
  int major, minor, patch;
  const char* hash;
  unsigned cpu_runtime, gpu_runtime;
};

// The OpenMP build of each library: the pthread builds keep a second thread pool (blas.h).
#ifndef STRATA_OPENBLAS_LIBRARY
#define STRATA_OPENBLAS_LIBRARY "/usr/lib/x86_64-linux-gnu/openblas-openmp/libopenblas.so.0"
#endif
constexpr const char* kBlisLibrary = "/usr/lib/x86_64-linux-gnu/blis-openmp/libblis.so.4";
constexpr const char* kOnednnLibrary = "libdnnl.so.2";

struct Loaded {
  BlasLibrary info;
  CblasSgemm cblas_sgemm = nullptr;
  DnnlSgemm dnnl_sgemm = nullptr;
  void (*openblas_set_threads)(int) = nullptr;
  void (*blis_set_threads)(std::int64_t) = nullptr;
};

template <class Function>
Function symbol(void* handle, const char* name, const char* library) {
  void* address = dlsym(handle, name);
  if (address == nullptr) fail("the BLAS library ", library, " has no ", name);
  return reinterpret_cast<Function>(address);
}

// OpenBLAS, with OPENBLAS_CORETYPE set from the feature flags unless the user set it; nullopt-like
// (handle null) when the library is absent. Loaded once: its initialiser reads the variable.
void* openblas_handle() {
  static void* const handle = [] {
    const char* given = std::getenv("OPENBLAS_CORETYPE");
    if (given == nullptr || *given == '\0') {
      const std::string core = openblas_core_for(CpuFeatures::of_this_cpu());
      if (!core.empty()) setenv("OPENBLAS_CORETYPE", core.c_str(), 1);
    }
    void* h = dlopen(STRATA_OPENBLAS_LIBRARY, RTLD_NOW | RTLD_LOCAL);
    return h != nullptr ? h : dlopen("libopenblas.so.0", RTLD_NOW | RTLD_LOCAL);
  }();
  return handle;
}

bool load_openblas(Loaded& loaded) {
  void* h = openblas_handle();
  if (h == nullptr) return false;
  loaded.cblas_sgemm = symbol<CblasSgemm>(h, "cblas_sgemm", "OpenBLAS");
  loaded.openblas_set_threads = symbol<void (*)(int)>(h, "openblas_set_num_threads", "OpenBLAS");
  const std::string config = symbol<char* (*)()>(h, "openblas_get_config", "OpenBLAS")();
  const int parallel = symbol<int (*)()>(h, "openblas_get_parallel", "OpenBLAS")();
  // "OpenBLAS 0.3.21 DYNAMIC_ARCH NO_AFFINITY SkylakeX MAX_THREADS=64": the second word.
  const std::size_t space = config.find(' ');
  loaded.info = {"openblas",
                 space == std::string::npos
                     ? ""
                     : config.substr(space + 1, config.find(' ', space + 1) - space - 1),
                 parallel == 2   ? "OpenMP"
                 : parallel == 1 ? "pthreads"
                                 : "sequential",
                 symbol<char* (*)()>(h, "openblas_get_corename", "OpenBLAS")()};
  return true;
}

bool load_blis(Loaded& loaded) {
  void* h = dlopen(kBlisLibrary, RTLD_NOW | RTLD_LOCAL);
  if (h == nullptr) return false;
  loaded.cblas_sgemm = symbol<CblasSgemm>(h, "cblas_sgemm", "BLIS");
  loaded.blis_set_threads = symbol<void (*)(std::int64_t)>(h, "bli_thread_set_num_threads", "BLIS");
  const int arch = symbol<int (*)()>(h, "bli_arch_query_id", "BLIS")();
  loaded.info = {"blis", symbol<char* (*)()>(h, "bli_info_get_version_str", "BLIS")(),
                 symbol<std::int64_t (*)()>(h, "bli_info_get_enable_openmp", "BLIS")() != 0
                     ? "OpenMP"
                     : "pthreads",
                 symbol<char* (*)(int)>(h, "bli_arch_string", "BLIS")(arch)};
  return true;
}

// oneDNN's dnnl_cpu_isa_t, as named in dnnl_types.h.
std::string onednn_isa_name(int isa) {
  switch (isa) {
    case 0x1:
      return "sse41";
    case 0x3:
      return "avx";
    case 0x7:
      return "avx2";
    case 0x407:
      return "avx2_vnni";
    case 0x27:
      return "avx512_core";
    case 0x67:
      return "avx512_core_vnni";
    case 0xe7:
      return "avx512_core_bf16";
    case 0x3e7:
      return "avx512_core_amx";
    default:
      return "isa 0x" + [&] {
        char hex[16];
        std::snprintf(hex, sizeof hex, "%x", static_cast<unsigned>(isa));
        return std::string(hex);
      }();
  }
}

bool load_onednn(Loaded& loaded) {
  void* h = dlopen(kOnednnLibrary, RTLD_NOW | RTLD_LOCAL);
  if (h == nullptr) return false;
  loaded.dnnl_sgemm = symbol<DnnlSgemm>(h, "dnnl_sgemm", "oneDNN");
  const DnnlVersion* v = symbol<const DnnlVersion* (*)()>(h, "dnnl_version", "oneDNN")();
  const int isa = symbol<int (*)()>(h, "dnnl_get_effective_cpu_isa", "oneDNN")();
  constexpr unsigned kRuntimeSequential = 1, kRuntimeOpenMp = 2;
  loaded.info = {
      "onednn",
      std::to_string(v->major) + "." + std::to_string(v->minor) + "." + std::to_string(v->patch),
      v->cpu_runtime == kRuntimeOpenMp       ? "OpenMP"
      : v->cpu_runtime == kRuntimeSequential ? "sequential"
                                             : "runtime " + std::to_string(v->cpu_runtime),
      onednn_isa_name(isa)};
  return true;
}

const Loaded& loaded() {
  static const Loaded library = [] {
    Loaded l;
    const char* asked = std::getenv("STRATA_BLAS");
    const std::string name = asked != nullptr ? asked : "";
    if (name == "onednn" || name == "openblas" || name == "blis") {
      const bool ok = name == "onednn"     ? load_onednn(l)
                      : name == "openblas" ? load_openblas(l)
                                           : load_blis(l);
      if (!ok) fail("STRATA_BLAS=", name, ": the library cannot be loaded (", dlerror(), ")");
      return l;
    }
    if (!name.empty()) fail("STRATA_BLAS must be onednn, openblas or blis, got '", name, "'");
    const bool loaded_one = kAddressSanitizerBuild ? load_openblas(l) || load_onednn(l)
                                                   : load_onednn(l) || load_openblas(l);
    if (loaded_one) return l;
    fail("no BLAS library could be loaded: install libdnnl2 or libopenblas0-openmp");
  }();
  return library;
}

CblasDgemm openblas_dgemm() {
  static const CblasDgemm dgemm = [] {
    void* h = openblas_handle();
    if (h == nullptr) fail("double GEMMs need OpenBLAS (libopenblas0-openmp): ", dlerror());
    return symbol<CblasDgemm>(h, "cblas_dgemm", "OpenBLAS");
  }();
  return dgemm;
}

}  // namespace

void gemm(bool trans_a, bool trans_b, int m, int n, int k, float alpha, const float* a, int lda,
          const float* b, int ldb, float beta, float* c, int ldc) {
  const Loaded& l = loaded();
  if (l.dnnl_sgemm != nullptr) {
    const int status = l.dnnl_sgemm(trans_a ? 'T' : 'N', trans_b ? 'T' : 'N', m, n, k, alpha, a,
                                    lda, b, ldb, beta, c, ldc);
    STRATA_CHECK(status == 0, "oneDNN sgemm failed with status ", status, " (", m, "x", n, "x", k,
                 ")");
    return;
  }
  l.cblas_sgemm(kRowMajor, trans_a ? kTrans : kNoTrans, trans_b ? kTrans : kNoTrans, m, n, k, alpha,
                a, lda, b, ldb, beta, c, ldc);
}

void gemm(bool trans_a, bool trans_b, int m, int n, int k, double alpha, const double* a, int lda,
          const double* b, int ldb, double beta, double* c, int ldc) {
  openblas_dgemm()(kRowMajor, trans_a ? kTrans : kNoTrans, trans_b ? kTrans : kNoTrans, m, n, k,
                   alpha, a, lda, b, ldb, beta, c, ldc);
}

const BlasLibrary& blas_library() { return loaded().info; }

std::string BlasLibrary::describe() const {
  return name + " " + version + " (" + threading + ", " + kernels + " kernels)";
}

void blas_set_threads(int threads) {
  const Loaded& l = loaded();
  if (l.openblas_set_threads != nullptr) l.openblas_set_threads(threads);
  if (l.blis_set_threads != nullptr) l.blis_set_threads(threads);
}

CpuFeatures CpuFeatures::of_this_cpu() {
  __builtin_cpu_init();
  CpuFeatures f;
  f.avx = __builtin_cpu_supports("avx");
  f.avx2 = __builtin_cpu_supports("avx2");
  f.fma = __builtin_cpu_supports("fma");
  f.avx512f = __builtin_cpu_supports("avx512f");
  f.avx512bw = __builtin_cpu_supports("avx512bw");
  f.avx512dq = __builtin_cpu_supports("avx512dq");
  f.avx512vl = __builtin_cpu_supports("avx512vl");
  f.avx512cd = __builtin_cpu_supports("avx512cd");
  return f;
}

std::string openblas_core_for(const CpuFeatures& f) {
  if (f.avx512f && f.avx512cd && f.avx512bw && f.avx512dq && f.avx512vl) return "SkylakeX";
  if (f.avx2 && f.fma) return "Haswell";
  if (f.avx) return "Sandybridge";
  return "";
}

}  // namespace strata::cpu
