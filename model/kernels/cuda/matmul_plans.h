// Cache of cuBLASLt matmul plans, owned by the DeviceContext: creating descriptors and asking the
// heuristic for an algorithm costs tens of microseconds, a training step runs the same few dozen
// GEMM shapes thousands of times. A plan is keyed by everything the heuristic depends on; only the
// epilogue pointers (bias, GELU input) change from call to call and are set before each launch.
#pragma once

#include <cublasLt.h>

#include <compare>
#include <cstddef>
#include <map>
#include <memory>

namespace strata::cuda {

// A column-major GEMM D (m × n) = op(A) (m × k) · op(B) (k × n) (+ β·C, C = D) on packed matrices:
// every leading dimension is the stored matrix's row count.
struct MatmulKey {
  cudaDataType_t ab_type;  // A and B (A alone when b_type says otherwise)
  cudaDataType_t cd_type;  // C and D
  cublasComputeType_t compute;
  bool trans_a;
  bool trans_b;
  long m, n, k;
  cublasLtEpilogue_t epilogue;
  int alignment;  // bytes (power of two ≤ 16) every operand and epilogue pointer is aligned to
  // FP8 GEMMs (fp8_matmul.h): B's type where it differs from A's (e5m2 gradients against e4m3),
  // else ab_type; and whether cuBLASLt may accumulate in the tensor cores' own precision
  // (CUBLASLT_MATMUL_DESC_FAST_ACCUM).
  cudaDataType_t b_type = ab_type;
  bool fast_accumulation = false;
  // FP8: the scale pointers hold one factor per row of D for A and per column for B
  // (CUBLASLT_MATMUL_MATRIX_SCALE_OUTER_VEC_32F, the rowwise recipe) rather than one each.
  bool outer_vector_scales = false;

  auto operator<=>(const MatmulKey&) const = default;
};

struct MatmulPlan {
  cublasLtMatmulDesc_t desc = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;
  cublasLtMatmulAlgo_t algo{};
  bool supported = false;  // the heuristic found an algorithm (else callers fall back)

  MatmulPlan() = default;
  ~MatmulPlan();
  MatmulPlan(const MatmulPlan&) = delete;
  MatmulPlan& operator=(const MatmulPlan&) = delete;
};

class MatmulPlanCache {
 public:
  MatmulPlan* find(const MatmulKey& key) {
    const auto it = plans_.find(key);
    return it == plans_.end() ? nullptr : it->second.get();
  }
  MatmulPlan& insert(const MatmulKey& key, std::unique_ptr<MatmulPlan> plan) {
    return *(plans_[key] = std::move(plan));
  }
  std::size_t size() const { return plans_.size(); }

 private:
  std::map<MatmulKey, std::unique_ptr<MatmulPlan>> plans_;
};

}  // namespace strata::cuda
