// A row-major (R, K) tensor is the column-major K × R matrix, so each linear layer is one
// column-major GEMM D = op(A)·op(B) with packed leading dimensions (stored shapes below):
//   forward      D = out  (OC × N)  A = weight (IC × OC), op T   B = inp  (IC × N)
//   input grad   D = dinp (IC × N)  A = weight (IC × OC)         B = dout (OC × N)
//   weight grad  D = dW   (IC × OC) A = inp    (IC × N)          B = dout (OC × N), op T;  β = 1
// The bias of the forward pass has one entry per row of D (OC), as the BIAS epilogue wants; the
// bias gradient is a sum of B over k = N per column of D (OC), which is what BGRADB computes.
#include "model/kernels/cuda/matmul.h"

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <initializer_list>
#include <type_traits>

#include "model/kernels/cuda/check.h"
#include "model/kernels/cuda/dtype.cuh"
#include "model/kernels/cuda/gelu.h"
#include "model/kernels/cuda/matmul_plans.h"
#include "model/kernels/cuda/residual.h"

// cuBLASLt's outer-vector scales (CUBLASLT_MATMUL_MATRIX_SCALE_OUTER_VEC_32F) came with cuBLAS
// 12.9; an older toolkit builds every other FP8 GEMM.
#if defined(CUBLAS_VERSION) && CUBLAS_VERSION >= 120900
#define STRATA_CUBLASLT_OUTER_VECTOR_SCALES 1
#else
#define STRATA_CUBLASLT_OUTER_VECTOR_SCALES 0
#endif

namespace strata::cuda {

MatmulPlan::~MatmulPlan() {
  // Destroy failures cannot be handled here (no throwing from destructors); report them.
  auto report = [](cublasStatus_t status, const char* what) {
    if (status != CUBLAS_STATUS_SUCCESS)
      std::fprintf(stderr, "cuBLASLt error %s in %s\n", cublasLtGetStatusName(status), what);
  };
  if (c != nullptr) report(cublasLtMatrixLayoutDestroy(c), "cublasLtMatrixLayoutDestroy");
  if (b != nullptr) report(cublasLtMatrixLayoutDestroy(b), "cublasLtMatrixLayoutDestroy");
  if (a != nullptr) report(cublasLtMatrixLayoutDestroy(a), "cublasLtMatrixLayoutDestroy");
  if (desc != nullptr) report(cublasLtMatmulDescDestroy(desc), "cublasLtMatmulDescDestroy");
}

namespace {

template <class T>
constexpr cudaDataType_t data_type() {
  if constexpr (std::is_same_v<T, float>) return CUDA_R_32F;
  if constexpr (std::is_same_v<T, __nv_bfloat16>) return CUDA_R_16BF;
  if constexpr (std::is_same_v<T, __half>) return CUDA_R_16F;
}

bool uses_bias_pointer(cublasLtEpilogue_t epilogue) {
  return epilogue == CUBLASLT_EPILOGUE_BIAS || epilogue == CUBLASLT_EPILOGUE_GELU_AUX_BIAS ||
         epilogue == CUBLASLT_EPILOGUE_BGRADB;
}

bool uses_aux_pointer(cublasLtEpilogue_t epilogue) {
  return epilogue == CUBLASLT_EPILOGUE_GELU_AUX || epilogue == CUBLASLT_EPILOGUE_GELU_AUX_BIAS ||
         epilogue == CUBLASLT_EPILOGUE_DGELU;
}

// The aux (GELU input) leading dimension must be a multiple of 8 (cublasLt.h,
// CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD); otherwise the fused epilogue is not attempted.
bool aux_ld_allowed(long ld) { return ld % 8 == 0; }

// Largest power of two, at most 16, dividing every non-null pointer. 16 bytes is the widest
// access a GEMM kernel makes; a larger alignment changes nothing but would split one shape's plan
// into several, each free to pick its own algorithm, and so its own summation order: recompute
// (arrays in a workspace) would then not be bitwise equal to keeping them.
int common_alignment(std::initializer_list<const void*> pointers) {
  std::uintptr_t bits = 16;
  for (const void* p : pointers)
    if (p != nullptr) bits |= reinterpret_cast<std::uintptr_t>(p);
  return static_cast<int>(bits & (~bits + 1));
}

// A stand-in epilogue pointer whose value is aligned to exactly `alignment` bytes. The heuristic
// reads the bias and aux pointers only for their alignment (cublasLt.h, BIAS_POINTER and
// EPILOGUE_AUX_POINTER: "routines that don't dereference this pointer ... depend on its value"),
// so a plan is chosen for the key's alignment, not for whichever call happened to create it.
const void* pointer_aligned_to(int alignment) {
  return reinterpret_cast<const void*>(static_cast<std::uintptr_t>(alignment));
}

template <class Value>
void set_attribute(cublasLtMatmulDesc_t desc, cublasLtMatmulDescAttributes_t attribute,
                   const Value& value) {
  STRATA_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(desc, attribute, &value, sizeof(value)));
}

bool is_fp8(cudaDataType_t type) { return type == CUDA_R_8F_E4M3 || type == CUDA_R_8F_E5M2; }

// An FP8 GEMM's dequantisation factors: D = scale_a · scale_b · (A·B), device floats.
void set_scale_pointers(cublasLtMatmulDesc_t desc, const void* a_scale, const void* b_scale) {
  set_attribute(desc, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, a_scale);
  set_attribute(desc, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, b_scale);
}

void set_epilogue_pointers(cublasLtMatmulDesc_t desc, cublasLtEpilogue_t epilogue, const void* bias,
                           const void* aux) {
  if (uses_bias_pointer(epilogue)) set_attribute(desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, bias);
  if (uses_aux_pointer(epilogue))
    set_attribute(desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, aux);
}

class Preference {
 public:
  Preference() { STRATA_CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&pref_)); }
  ~Preference() {
    const cublasStatus_t status = cublasLtMatmulPreferenceDestroy(pref_);
    if (status != CUBLAS_STATUS_SUCCESS)
      std::fprintf(stderr, "cuBLASLt error %s in cublasLtMatmulPreferenceDestroy\n",
                   cublasLtGetStatusName(status));
  }
  Preference(const Preference&) = delete;
  Preference& operator=(const Preference&) = delete;
  template <class Value>
  void set(cublasLtMatmulPreferenceAttributes_t attribute, Value value) {
    STRATA_CUBLAS_CHECK(
        cublasLtMatmulPreferenceSetAttribute(pref_, attribute, &value, sizeof(value)));
  }
  cublasLtMatmulPreference_t get() const { return pref_; }

 private:
  cublasLtMatmulPreference_t pref_ = nullptr;
};

// The cached plan for `key`, created on first use. `required`: the plain and bias epilogues, which
// exist for every type combination used here, so any heuristic failure is an error; the fused
// epilogues are optional, and any failure only marks the plan unsupported (callers fall back).
MatmulPlan& plan_for(DeviceContext& ctx, const MatmulKey& key, bool required) {
  if (MatmulPlan* cached = ctx.matmul_plans().find(key)) return *cached;
  auto plan = std::make_unique<MatmulPlan>();
  STRATA_CUBLAS_CHECK(cublasLtMatmulDescCreate(&plan->desc, key.compute, CUDA_R_32F));
  const cublasOperation_t op_a = key.trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;
  const cublasOperation_t op_b = key.trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
  set_attribute(plan->desc, CUBLASLT_MATMUL_DESC_TRANSA, op_a);
  set_attribute(plan->desc, CUBLASLT_MATMUL_DESC_TRANSB, op_b);
  set_attribute(plan->desc, CUBLASLT_MATMUL_DESC_EPILOGUE, key.epilogue);
  if (uses_aux_pointer(key.epilogue))
    set_attribute(plan->desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD,
                  static_cast<std::int64_t>(key.m));
  const void* stand_in = pointer_aligned_to(key.alignment);
  set_epilogue_pointers(plan->desc, key.epilogue, stand_in, stand_in);

  // Stored (pre-op) shapes, packed: the leading dimension is the row count.
  const long a_rows = key.trans_a ? key.k : key.m, a_cols = key.trans_a ? key.m : key.k;
  const long b_rows = key.trans_b ? key.n : key.k, b_cols = key.trans_b ? key.k : key.n;
  STRATA_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&plan->a, key.ab_type, a_rows, a_cols, a_rows));
  STRATA_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&plan->b, key.b_type, b_rows, b_cols, b_rows));
  if (is_fp8(key.ab_type)) {
    set_attribute(plan->desc, CUBLASLT_MATMUL_DESC_FAST_ACCUM,
                  static_cast<std::int8_t>(key.fast_accumulation ? 1 : 0));
    if (key.outer_vector_scales) {
#if STRATA_CUBLASLT_OUTER_VECTOR_SCALES
      const auto mode = static_cast<std::int32_t>(CUBLASLT_MATMUL_MATRIX_SCALE_OUTER_VEC_32F);
      set_attribute(plan->desc, CUBLASLT_MATMUL_DESC_A_SCALE_MODE, mode);
      set_attribute(plan->desc, CUBLASLT_MATMUL_DESC_B_SCALE_MODE, mode);
#else
      fail("FP8 GEMMs with per-row scales need cuBLAS 12.9 or later (this build's is older)");
#endif
    }
    set_scale_pointers(plan->desc, stand_in, stand_in);
  }
  STRATA_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&plan->c, key.cd_type, key.m, key.n, key.m));

  Preference pref;
  pref.set(CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
           static_cast<std::uint64_t>(ctx.workspace_bytes()));
  const auto alignment = static_cast<std::uint32_t>(key.alignment);
  pref.set(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, alignment);
  pref.set(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, alignment);
  pref.set(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, alignment);
  pref.set(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, alignment);
  cublasLtMatmulHeuristicResult_t result{};
  int found = 0;
  const cublasStatus_t status = cublasLtMatmulAlgoGetHeuristic(
      ctx.blaslt(), plan->desc, plan->a, plan->b, plan->c, plan->c, pref.get(), 1, &result, &found);
  // NOT_SUPPORTED (no algorithm for this combination) is an answer, cached like a success; so is
  // any refusal of outer-vector scales, which the caller names.
  if (required && status != CUBLAS_STATUS_NOT_SUPPORTED && !key.outer_vector_scales)
    STRATA_CUBLAS_CHECK(status);
  plan->supported =
      status == CUBLAS_STATUS_SUCCESS && found > 0 && result.state == CUBLAS_STATUS_SUCCESS;
  if (plan->supported) plan->algo = result.algo;
  return ctx.matmul_plans().insert(key, std::move(plan));
}

cublasStatus_t launch_plan(DeviceContext& ctx, MatmulPlan& plan, const MatmulKey& key,
                           const void* a, const void* b, void* d, float beta, const void* bias,
                           const void* aux, const float* a_scale = nullptr,
                           const float* b_scale = nullptr) {
  set_epilogue_pointers(plan.desc, key.epilogue, bias, aux);
  if (is_fp8(key.ab_type)) set_scale_pointers(plan.desc, a_scale, b_scale);
  const float alpha = 1.0f;
  return cublasLtMatmul(ctx.blaslt(), plan.desc, &alpha, a, plan.a, b, plan.b, &beta, d, plan.c, d,
                        plan.c, &plan.algo, ctx.workspace(), ctx.workspace_bytes(), ctx.stream());
}

// A fused (optional) epilogue: false, with the plan marked unsupported for next time, when the
// heuristic found nothing or cuBLASLt refuses the launch; the caller then runs the unfused ops.
// cuBLASLt checks its arguments before it launches, so a refused call has written nothing.
bool try_fused(DeviceContext& ctx, const MatmulKey& key, const void* a, const void* b, void* d,
               float beta, const void* bias, const void* aux) {
  MatmulPlan& plan = plan_for(ctx, key, false);
  if (!plan.supported) return false;
  if (launch_plan(ctx, plan, key, a, b, d, beta, bias, aux) == CUBLAS_STATUS_SUCCESS) return true;
  plan.supported = false;
  return false;
}

template <class AB, class CD>
MatmulKey make_key(const DeviceContext& ctx, bool trans_a, bool trans_b, long m, long n, long k) {
  const bool tf32 = std::is_same_v<AB, float> && ctx.allow_tf32();
  return MatmulKey{data_type<AB>(),
                   data_type<CD>(),
                   tf32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F,
                   trans_a,
                   trans_b,
                   m,
                   n,
                   k,
                   CUBLASLT_EPILOGUE_DEFAULT,
                   16};
}

// Runs the GEMM of `key` with `epilogue`; Error if cuBLASLt has no algorithm for it (plain and
// bias epilogues exist for every type combination used here).
void run_required(DeviceContext& ctx, MatmulKey key, cublasLtEpilogue_t epilogue, const void* a,
                  const void* b, void* d, float beta, const void* bias) {
  key.epilogue = epilogue;
  key.alignment = common_alignment({a, b, d, bias});
  MatmulPlan& plan = plan_for(ctx, key, true);
  if (!plan.supported)
    fail("cuBLASLt has no algorithm for a ", key.m, "x", key.n, "x", key.k, " GEMM (epilogue ",
         static_cast<int>(epilogue), ")");
  STRATA_CUBLAS_CHECK(launch_plan(ctx, plan, key, a, b, d, beta, bias, nullptr));
}

// cuBLASLt's GELU epilogues compute the tanh form, likely with the hardware's approximate tanh
// (about 2^-11 relative error): far inside bf16/fp16 rounding, but not within the fp32 path's
// 1e-5 of the CPU reference. fp32, the reference path, runs the exact GELU kernel instead.
template <class T>
constexpr bool kFuseGelu = !std::is_same_v<T, float>;

__global__ void accumulate_kernel(float* dst, const float* src, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) dst[i] += src[i];
}

}  // namespace

template <class T>
void matmul_forward(DeviceContext& ctx, T* out, T* pre_gelu, const T* inp, const T* weight,
                    const T* bias, int N, int IC, int OC) {
  STRATA_CHECK(N >= 0 && IC > 0 && OC > 0);
  if (N == 0) return;
  MatmulKey key = make_key<T, T>(ctx, true, false, OC, N, IC);
  if (kFuseGelu<T> && pre_gelu != nullptr && aux_ld_allowed(OC)) {
    MatmulKey fused = key;
    fused.epilogue = bias != nullptr ? CUBLASLT_EPILOGUE_GELU_AUX_BIAS : CUBLASLT_EPILOGUE_GELU_AUX;
    fused.alignment = common_alignment({out, pre_gelu, inp, weight, bias});
    if (try_fused(ctx, fused, weight, inp, out, 0.0f, bias, pre_gelu)) return;
  }
  T* linear_out = pre_gelu != nullptr ? pre_gelu : out;
  run_required(ctx, key, bias != nullptr ? CUBLASLT_EPILOGUE_BIAS : CUBLASLT_EPILOGUE_DEFAULT,
               weight, inp, linear_out, 0.0f, bias);
  if (pre_gelu != nullptr) gelu_forward(out, pre_gelu, static_cast<long>(N) * OC, ctx.stream());
}

template <class T>
void matmul_backward_input(DeviceContext& ctx, T* dinp, const T* dout, const T* weight,
                           const T* pre_gelu, int N, int IC, int OC) {
  STRATA_CHECK(N >= 0 && IC > 0 && OC > 0);
  if (N == 0) return;
  MatmulKey key = make_key<T, T>(ctx, false, false, IC, N, OC);
  if (kFuseGelu<T> && pre_gelu != nullptr && aux_ld_allowed(IC)) {
    MatmulKey fused = key;
    fused.epilogue = CUBLASLT_EPILOGUE_DGELU;
    fused.alignment = common_alignment({dinp, dout, weight, pre_gelu});
    if (try_fused(ctx, fused, weight, dout, dinp, 0.0f, nullptr, pre_gelu)) return;
  }
  run_required(ctx, key, CUBLASLT_EPILOGUE_DEFAULT, weight, dout, dinp, 0.0f, nullptr);
  if (pre_gelu != nullptr)
    gelu_backward(dinp, pre_gelu, dinp, static_cast<long>(N) * IC, ctx.stream());
}

template <class T>
void matmul_backward_weight(DeviceContext& ctx, float* dweight, float* dbias, const T* dout,
                            const T* inp, int N, int IC, int OC, DeviceArena& arena) {
  STRATA_CHECK(N >= 0 && IC > 0 && OC > 0);
  if (N == 0) return;
  MatmulKey key = make_key<T, float>(ctx, false, true, IC, OC, N);
  if (dbias != nullptr) {
    ArenaScope scope(arena);
    float* bias_grad = arena.allocate<float>(static_cast<std::size_t>(OC));
    MatmulKey fused = key;
    fused.epilogue = CUBLASLT_EPILOGUE_BGRADB;
    fused.alignment = common_alignment({dweight, dout, inp, bias_grad});
    if (try_fused(ctx, fused, inp, dout, dweight, 1.0f, bias_grad, nullptr)) {
      accumulate_kernel<<<(OC + 255) / 256, 256, 0, ctx.stream()>>>(dbias, bias_grad, OC);
      STRATA_CUDA_CHECK_LAUNCH();
      return;
    }
  }
  run_required(ctx, key, CUBLASLT_EPILOGUE_DEFAULT, inp, dout, dweight, 1.0f, nullptr);
  if (dbias != nullptr) bias_backward(dbias, dout, N, OC, arena, ctx.stream());
}

namespace {

// d (rows, cols) += bias (cols) on every row: an FP8 GEMM's bias where cuBLASLt has no bias
// epilogue for its scales (the sum rounded to D twice, where the epilogue rounds once).
template <class D>
__global__ void add_row_bias_kernel(D* d, const D* bias, int rows, int cols) {
  const long n = static_cast<long>(rows) * cols;
  for (long i = static_cast<long>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += static_cast<long>(gridDim.x) * blockDim.x)
    d[i] = from_float<D>(to_float(d[i]) + to_float(bias[i % cols]));
}

template <class D>
void add_row_bias(D* d, const D* bias, int rows, int cols, cudaStream_t stream) {
  const long n = static_cast<long>(rows) * cols;
  const long blocks = std::min<long>((n + 255) / 256, 4096);
  add_row_bias_kernel<<<static_cast<unsigned>(blocks), 256, 0, stream>>>(d, bias, rows, cols);
  STRATA_CUDA_CHECK_LAUNCH();
}

cudaDataType_t fp8_type(Fp8Format format) {
  return format == Fp8Format::e4m3 ? CUDA_R_8F_E4M3 : CUDA_R_8F_E5M2;
}
}  // namespace

bool fp8_row_scales_available() {
  return STRATA_CUBLASLT_OUTER_VECTOR_SCALES && cublasLtGetVersion() >= 120900;
}

// d (rows, cols) row-major is the column-major cols × rows matrix D = op(A)·op(B) with A = b
// (stored K × cols column-major, op T) and B = a (K × rows, op N): cuBLASLt's "TN", the one
// layout its FP8 kernels take. So cuBLASLt's A is our b and its scale b_inverse.
template <class D>
void fp8_matmul(DeviceContext& ctx, D* d, const std::uint8_t* a, Fp8Format a_format,
                const float* a_inverse, const std::uint8_t* b, Fp8Format b_format,
                const float* b_inverse, int rows, int cols, int K, float beta,
                const std::type_identity_t<D>* bias, Fp8Scales scales) {
  STRATA_CHECK(rows >= 0 && cols > 0 && K > 0);
  STRATA_CHECK(bias == nullptr || (beta == 0.0f && std::is_same_v<D, __nv_bfloat16>),
               "an FP8 GEMM adds a bias only to a bf16 output it overwrites");
  // cuBLASLt's FP8 kernels: every dimension a multiple of 16, every pointer 16-byte aligned.
  const int alignment = common_alignment({a, b, d, bias});
  if (rows % 16 != 0 || cols % 16 != 0 || K % 16 != 0 || alignment < 16)
    fail("an FP8 GEMM of ", rows, "x", cols, "x", K, " (pointers aligned to ", alignment,
         " bytes): cuBLASLt's FP8 kernels need dimensions that are multiples of 16 and 16-byte "
         "aligned operands (tokens per micro-batch and this rank's layer widths; "
         "precision.fp8_min_size keeps small layers in bf16)");
  STRATA_CHECK(a_format == Fp8Format::e4m3 || b_format == Fp8Format::e4m3,
               "FP8 GEMMs take at most one e5m2 operand");
  STRATA_CHECK((std::is_same_v<D, float>) || beta == 0.0f, "an FP8 GEMM adds only into fp32");
  if (rows == 0) return;
  MatmulKey key{fp8_type(b_format),
                data_type<D>(),
                CUBLAS_COMPUTE_32F,
                true,
                false,
                cols,
                rows,
                K,
                bias != nullptr ? CUBLASLT_EPILOGUE_BIAS : CUBLASLT_EPILOGUE_DEFAULT,
                alignment};
  key.b_type = fp8_type(a_format);
  key.fast_accumulation = false;
  // cuBLASLt's D is our dᵀ (column-major): its A is our b and its rows our columns, so b's
  // factors are its A scales (an outer vector over D's rows) and a's its B scales.
  key.outer_vector_scales = scales == Fp8Scales::rows;
  if (bias != nullptr) {
    MatmulPlan& fused = plan_for(ctx, key, false);
    if (fused.supported && launch_plan(ctx, fused, key, b, a, d, beta, bias, nullptr, b_inverse,
                                       a_inverse) == CUBLAS_STATUS_SUCCESS)
      return;
    fused.supported = false;  // refused: the plain GEMM and the bias kernel from now on
    key.epilogue = CUBLASLT_EPILOGUE_DEFAULT;
  }
  MatmulPlan& plan = plan_for(ctx, key, true);
  if (!plan.supported)
    fail("cuBLASLt has no FP8 algorithm for a ", rows, "x", cols, "x", K, " GEMM",
         scales == Fp8Scales::rows ? " with per-row scales (the rowwise recipe: Hopper and cuBLAS "
                                     "12.9 or later; tensorwise runs on 8.9)"
                                   : "");
  STRATA_CUBLAS_CHECK(
      launch_plan(ctx, plan, key, b, a, d, beta, nullptr, nullptr, b_inverse, a_inverse));
  if (bias != nullptr) add_row_bias(d, bias, rows, cols, ctx.stream());
}

template void fp8_matmul<float>(DeviceContext&, float*, const std::uint8_t*, Fp8Format,
                                const float*, const std::uint8_t*, Fp8Format, const float*, int,
                                int, int, float, const float*, Fp8Scales);
template void fp8_matmul<__nv_bfloat16>(DeviceContext&, __nv_bfloat16*, const std::uint8_t*,
                                        Fp8Format, const float*, const std::uint8_t*, Fp8Format,
                                        const float*, int, int, int, float, const __nv_bfloat16*,
                                        Fp8Scales);

#define STRATA_INSTANTIATE(T)                                                                      \
  template void matmul_forward<T>(DeviceContext&, T*, T*, const T*, const T*, const T*, int, int,  \
                                  int);                                                            \
  template void matmul_backward_input<T>(DeviceContext&, T*, const T*, const T*, const T*, int,    \
                                         int, int);                                                \
  template void matmul_backward_weight<T>(DeviceContext&, float*, float*, const T*, const T*, int, \
                                          int, int, DeviceArena&);
STRATA_INSTANTIATE(float)
STRATA_INSTANTIATE(__nv_bfloat16)
STRATA_INSTANTIATE(__half)
#undef STRATA_INSTANTIATE

}  // namespace strata::cuda
