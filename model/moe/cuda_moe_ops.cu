// CudaOps<T>'s mixture-of-experts ops (model/ops/cuda_ops.h), defined beside the MoE layer (as
// cpu_moe_ops.cpp): the launcher sequences, the routing's host round trip and the host-staged
// expert-parallel exchange that CudaMoeLayer queued inline before the ops existed, with the same
// kernels, arguments and order. model/moe/moe_mlp_impl.h calls them; the CPU counterparts are
// cpu_moe_ops.cpp.
#include <cstdint>
#include <type_traits>
#include <vector>

#include "model/kernels/cuda/cast.h"
#include "model/kernels/cuda/matmul.h"
#include "model/kernels/cuda/moe.h"
#include "model/moe/moe_exchange.h"
#include "model/moe/moe_routing.h"
#include "model/ops/cuda_ops.h"

namespace strata::cuda {
namespace {

// fp32 GEMMs in exact fp32 for the guard's lifetime, whatever the context allows: the router
// runs in full precision (its forward sums in fp32 in moe_router_forward).
class ExactFp32 {
 public:
  explicit ExactFp32(DeviceContext& ctx) : ctx_(ctx), allowed_(ctx.allow_tf32()) {
    ctx_.set_allow_tf32(false);
  }
  ~ExactFp32() { ctx_.set_allow_tf32(allowed_); }
  ExactFp32(const ExactFp32&) = delete;
  ExactFp32& operator=(const ExactFp32&) = delete;

 private:
  DeviceContext& ctx_;
  bool allowed_;
};

}  // namespace

template <class T>
void CudaOps<T>::moe_router_forward(Stat* probs, Stat* lse, int* choices, Stat* gates,
                                    const Value* x, const Value* router, int N, int C, int E,
                                    int k) {
  ArenaScope scope(scratch_);
  float* logits = scratch_.allocate<float>(static_cast<std::size_t>(N) * E);
  cuda::moe_router_forward(probs, lse, choices, gates, logits, x, router, N, C, E, k,
                           ctx_.stream());
}

template <class T>
MoeRouterHost CudaOps<T>::moe_router_to_host(const int* choices, const Stat* probs, const Stat* lse,
                                             int N, int E, int k) {
  cudaStream_t stream = ctx_.stream();
  ArenaScope scope(scratch_);
  double* sums = scratch_.allocate<double>(static_cast<std::size_t>(E) + 1);
  moe_router_sums(sums, probs, lse, N, E, stream);
  moe_host_choices_.resize(static_cast<std::size_t>(N) * k);
  moe_host_sums_.resize(static_cast<std::size_t>(E) + 1);
  STRATA_CUDA_CHECK(cudaMemcpyAsync(moe_host_choices_.data(), choices,
                                    moe_host_choices_.size() * sizeof(int), cudaMemcpyDeviceToHost,
                                    stream));
  STRATA_CUDA_CHECK(cudaMemcpyAsync(moe_host_sums_.data(), sums,
                                    moe_host_sums_.size() * sizeof(double), cudaMemcpyDeviceToHost,
                                    stream));
  STRATA_CUDA_CHECK(cudaStreamSynchronize(stream));
  MoeRouterHost host;
  host.choices = moe_host_choices_.data();
  host.prob_sums.assign(moe_host_sums_.begin(), moe_host_sums_.begin() + E);
  host.z = moe_host_sums_[static_cast<std::size_t>(E)] / N;  // (Σ lse²) / N
  return host;
}

template <class T>
void CudaOps<T>::moe_routing_to_device(int* assignments, Stat* share, const MoeRouting& routing,
                                       const std::vector<double>& chosen_share) {
  cudaStream_t stream = ctx_.stream();
  moe_host_share_.resize(chosen_share.size());
  for (std::size_t e = 0; e < chosen_share.size(); ++e)
    moe_host_share_[e] = static_cast<float>(chosen_share[e]);  // the CPU's static_cast<T>
  const std::size_t A = routing.assignments.size();
  if (A > 0)
    STRATA_CUDA_CHECK(cudaMemcpyAsync(assignments, routing.assignments.data(), A * sizeof(int),
                                      cudaMemcpyHostToDevice, stream));
  STRATA_CUDA_CHECK(cudaMemcpyAsync(share, moe_host_share_.data(),
                                    moe_host_share_.size() * sizeof(float), cudaMemcpyHostToDevice,
                                    stream));
}

template <class T>
void CudaOps<T>::moe_gather_rows(Value* xe, int* row, const Value* x, const int* assignments, int A,
                                 int N, int k, int C) {
  // Rows of the dropped choices stay −1 (all bits set).
  STRATA_CUDA_CHECK(
      cudaMemsetAsync(row, 0xff, static_cast<std::size_t>(N) * k * sizeof(int), ctx_.stream()));
  cuda::moe_gather_rows(xe, row, x, assignments, A, k, C, ctx_.stream());
}

template <class T>
void CudaOps<T>::moe_exchange_rows(RowExchange direction, const MoeExchange& plan, Collectives& ep,
                                   const Value* from, Value* to, int C) {
  cudaStream_t stream = ctx_.stream();
  const int row_bytes = C * static_cast<int>(sizeof(T));
  const std::size_t bytes = static_cast<std::size_t>(row_bytes);
  // A dispatch sends the origin's A rows and receives R expert rows; a combine the reverse.
  const bool dispatch = direction == RowExchange::dispatch;
  const std::size_t A = plan.rows_sent(), R = static_cast<std::size_t>(plan.received());
  std::vector<std::uint8_t>& leaving = dispatch ? moe_host_sent_ : moe_host_received_;
  std::vector<std::uint8_t>& arriving = dispatch ? moe_host_received_ : moe_host_sent_;
  const std::size_t leaving_rows = dispatch ? A : R, arriving_rows = dispatch ? R : A;
  leaving.resize(leaving_rows * bytes);
  if (leaving_rows > 0)
    STRATA_CUDA_CHECK(
        cudaMemcpyAsync(leaving.data(), from, leaving.size(), cudaMemcpyDeviceToHost, stream));
  STRATA_CUDA_CHECK(cudaStreamSynchronize(stream));
  if (dispatch)
    moe_dispatch(plan, ep, leaving.data(), row_bytes, arriving);
  else
    moe_combine(plan, ep, leaving.data(), row_bytes, arriving);
  // Pageable: staged before the call returns, so the host array may change afterwards.
  if (arriving_rows > 0)
    STRATA_CUDA_CHECK(cudaMemcpyAsync(to, arriving.data(), arriving_rows * bytes,
                                      cudaMemcpyHostToDevice, stream));
}

template <class T>
void CudaOps<T>::moe_combine_rows(Value* y, const Value* out, const Stat* gates, const int* row,
                                  int N, int k, int C) {
  cuda::moe_combine_rows(y, out, gates, row, N, k, C, ctx_.stream());
}

template <class T>
void CudaOps<T>::moe_gate_grads(Stat* dgates, Value* dout, const Value* dy, const Value* out,
                                const Stat* gates, const int* assignments, int A, int N, int k,
                                int C) {
  cuda::moe_gate_grads(dgates, dout, dy, out, gates, assignments, A, k, C, ctx_.stream());
  // Each rank's dot covers its part of the output (rank 0's with the proj bias): the sum is the
  // whole output's.
  if (tp_ != nullptr && tp_->size() > 1)
    tp_->all_reduce_sum(dgates, static_cast<std::size_t>(N) * k, ctx_.stream());
}

template <class T>
void CudaOps<T>::moe_router_grads(Stat* dlogits, const Stat* probs, const Stat* lse,
                                  const int* choices, const Stat* gates, const Stat* dgates,
                                  const Stat* share, Stat aux_scale, Stat z_scale, int N, int E,
                                  int k) {
  ArenaScope scope(scratch_);
  float* dp = scratch_.allocate<float>(static_cast<std::size_t>(N) * E);
  cuda::moe_router_grads(dlogits, dp, probs, lse, choices, gates, dgates, share, aux_scale, z_scale,
                         N, E, k, ctx_.stream());
}

template <class T>
void CudaOps<T>::moe_input_grads(Value* dx, const Stat* dlogits, const Value* router,
                                 const Value* dxe, const int* row, int N, int k, int E, int C) {
  cuda::moe_input_grads(dx, dlogits, router, dxe, row, N, k, E, C, ctx_.stream());
}

template <class T>
void CudaOps<T>::moe_router_weight_grad(Grad* drouter, const Stat* dlogits, const Value* x, int N,
                                        int C, int E) {
  if (N == 0) return;
  ArenaScope scope(scratch_);
  const float* x_fp32 = nullptr;
  if constexpr (std::is_same_v<T, float>) {
    x_fp32 = x;
  } else {
    float* copy = scratch_.allocate<float>(static_cast<std::size_t>(N) * C);
    cast(copy, x, static_cast<long>(N) * C, ctx_.stream());
    x_fp32 = copy;
  }
  ExactFp32 exact(ctx_);
  cuda::matmul_backward_weight(ctx_, drouter, static_cast<float*>(nullptr), dlogits, x_fp32, N, C,
                               E, scratch_);
}

// These members only (the class itself is instantiated in cuda_ops.cu).
#define STRATA_CUDA_MOE_OPS(T)                                                                     \
  template void CudaOps<T>::moe_router_forward(float*, float*, int*, float*, const T*, const T*,   \
                                               int, int, int, int);                                \
  template MoeRouterHost CudaOps<T>::moe_router_to_host(const int*, const float*, const float*,    \
                                                        int, int, int);                            \
  template void CudaOps<T>::moe_routing_to_device(int*, float*, const MoeRouting&,                 \
                                                  const std::vector<double>&);                     \
  template void CudaOps<T>::moe_gather_rows(T*, int*, const T*, const int*, int, int, int, int);   \
  template void CudaOps<T>::moe_exchange_rows(RowExchange, const MoeExchange&, Collectives&,       \
                                              const T*, T*, int);                                  \
  template void CudaOps<T>::moe_combine_rows(T*, const T*, const float*, const int*, int, int,     \
                                             int);                                                 \
  template void CudaOps<T>::moe_gate_grads(float*, T*, const T*, const T*, const float*,           \
                                           const int*, int, int, int, int);                        \
  template void CudaOps<T>::moe_router_grads(float*, const float*, const float*, const int*,       \
                                             const float*, const float*, const float*, float,      \
                                             float, int, int, int);                                \
  template void CudaOps<T>::moe_input_grads(T*, const float*, const T*, const T*, const int*, int, \
                                            int, int, int);                                        \
  template void CudaOps<T>::moe_router_weight_grad(float*, const float*, const T*, int, int, int);
STRATA_CUDA_MOE_OPS(float)
STRATA_CUDA_MOE_OPS(__nv_bfloat16)
STRATA_CUDA_MOE_OPS(__half)
#undef STRATA_CUDA_MOE_OPS

}  // namespace strata::cuda
