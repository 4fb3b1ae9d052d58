// CudaMoeLayer (moe_layer_cuda.h): the CPU reference's steps (model/moe/moe_layer.cpp) in the same
// order, each a kernel of model/kernels/cuda/moe.h or a per-expert cuBLASLt call.
// Status: compiled, never run on a GPU.
#include "model/moe/moe_layer_cuda.h"

#include <algorithm>
#include <cstdint>
#include <type_traits>

#include "model/core/error.h"
#include "model/kernels/cuda/cast.h"
#include "model/kernels/cuda/check.h"
#include "model/kernels/cuda/matmul.h"
#include "model/kernels/cuda/moe.h"

namespace strata::cuda {
namespace {

std::size_t aligned_bytes(std::size_t bytes) {
  constexpr std::size_t align = DeviceArena::kDefaultAlignment;
  return (bytes + align - 1) / align * align;
}

// The activation arrays for N tokens, each from take(count, element bytes): run once to count
// the bytes, once to allocate.
template <class T, class Take>
void lay_out(CudaMoeActivations<T>& a, std::size_t N, std::size_t k, std::size_t E, std::size_t C,
             std::size_t H, std::size_t P, Take&& take) {
  auto array = [&](auto*& pointer, std::size_t count) {
    using Element = std::remove_pointer_t<std::remove_reference_t<decltype(pointer)>>;
    pointer = static_cast<Element*>(take(count, sizeof(Element)));
  };
  const std::size_t A = N * k;  // every choice kept: the dropless bound
  const std::size_t R = P * A;  // and every member's sent here (the header says why)
  array(a.probs, N * E);
  array(a.lse, N);
  array(a.gates, N * k);
  array(a.choices, N * k);
  array(a.row, N * k);
  array(a.assignments, A);
  array(a.chosen_share, E);
  array(a.router_sums, E + 1);
  array(a.xe, R * C);
  array(a.out, A * C);
  array(a.pre, R * H);
  array(a.act, R * H);
  array(a.dout, R * C);
  array(a.dpre, R * H);
  array(a.dlogits, N * E);
}

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
CudaMoeLayer<T>::CudaMoeLayer(DeviceContext& ctx, DeviceArena& scratch, int d_model,
                              const MoeConfig& config, DeviceCollectives* tp, Collectives* ep)
    : ctx_(ctx),
      scratch_(scratch),
      C_(d_model),
      H_(4 * d_model / (tp != nullptr ? tp->size() : 1)),
      config_(config),
      tp_(tp),
      ep_(ep != nullptr ? ep : &alone_),
      at_{static_cast<std::size_t>(d_model), static_cast<std::size_t>(config.experts),
          static_cast<std::size_t>(H_), static_cast<std::size_t>(config.experts / ep_->size())} {
  STRATA_CHECK(config.experts >= 1 && config.top_k >= 1 && config.top_k <= config.experts,
               "MoE layer: top_k ", config.top_k, " of ", config.experts, " experts");
  STRATA_CHECK(config.experts % ep_->size() == 0, "expert parallelism of ", ep_->size(),
               " does not divide ", config.experts, " experts");
}

template <class T>
void CudaMoeLayer<T>::dispatch_rows(const MoeExchange& x, const T* from, T* to) {
  cudaStream_t stream = ctx_.stream();
  const int row_bytes = C_ * static_cast<int>(sizeof(T));
  std::size_t A = 0;
  for (std::size_t rows : x.sent_rows) A += rows;
  const std::size_t R = static_cast<std::size_t>(x.received());
  host_sent_.resize(A * static_cast<std::size_t>(row_bytes));
  if (A > 0)
    STRATA_CUDA_CHECK(cudaMemcpyAsync(host_sent_.data(), from, host_sent_.size(),
                                      cudaMemcpyDeviceToHost, stream));
  STRATA_CUDA_CHECK(cudaStreamSynchronize(stream));
  moe_dispatch(x, *ep_, host_sent_.data(), row_bytes, host_received_);
  // Pageable: staged before the call returns, so the host array may change afterwards.
  if (R > 0)
    STRATA_CUDA_CHECK(cudaMemcpyAsync(to, host_received_.data(),
                                      R * static_cast<std::size_t>(row_bytes),
                                      cudaMemcpyHostToDevice, stream));
}

template <class T>
void CudaMoeLayer<T>::combine_rows(const MoeExchange& x, const T* from, T* to) {
  cudaStream_t stream = ctx_.stream();
  const int row_bytes = C_ * static_cast<int>(sizeof(T));
  std::size_t A = 0;
  for (std::size_t rows : x.sent_rows) A += rows;
  const std::size_t R = static_cast<std::size_t>(x.received());
  host_received_.resize(R * static_cast<std::size_t>(row_bytes));
  if (R > 0)
    STRATA_CUDA_CHECK(cudaMemcpyAsync(host_received_.data(), from, host_received_.size(),
                                      cudaMemcpyDeviceToHost, stream));
  STRATA_CUDA_CHECK(cudaStreamSynchronize(stream));
  moe_combine(x, *ep_, host_received_.data(), row_bytes, host_sent_);
  if (A > 0)
    STRATA_CUDA_CHECK(cudaMemcpyAsync(to, host_sent_.data(),
                                      A * static_cast<std::size_t>(row_bytes),
                                      cudaMemcpyHostToDevice, stream));
}

template <class T>
std::size_t CudaMoeLayer<T>::activation_bytes(int d_model, int tp_size, const MoeConfig& config,
                                              int max_tokens, int ep_size) {
  std::size_t bytes = 0;
  CudaMoeActivations<T> a;
  lay_out(a, static_cast<std::size_t>(max_tokens), static_cast<std::size_t>(config.top_k),
          static_cast<std::size_t>(config.experts), static_cast<std::size_t>(d_model),
          static_cast<std::size_t>(4 * d_model / tp_size), static_cast<std::size_t>(ep_size),
          [&](std::size_t count, std::size_t size) -> void* {
            bytes += aligned_bytes(count * size);
            return nullptr;
          });
  return bytes;
}

template <class T>
std::size_t CudaMoeLayer<T>::activation_bytes(int max_tokens) const {
  return activation_bytes(C_, tp_size(), config_, max_tokens, ep_->size());
}

template <class T>
std::size_t CudaMoeLayer<T>::scratch_bytes(int d_model, int tp_size, const MoeConfig& config,
                                           int max_tokens, int ep_size) {
  const std::size_t N = static_cast<std::size_t>(max_tokens);
  const std::size_t k = static_cast<std::size_t>(config.top_k);
  const std::size_t E = static_cast<std::size_t>(config.experts);
  const std::size_t C = static_cast<std::size_t>(d_model);
  const std::size_t H = static_cast<std::size_t>(4 * d_model / tp_size);
  const std::size_t A = N * k, R = static_cast<std::size_t>(ep_size) * A;  // as lay_out's
  const bool exchanged = ep_size > 1;
  // The logits, then under expert parallelism the gathered rows (A, C) before the dispatch and
  // the experts' outputs (R, C) before the combine.
  const std::size_t forward = std::max(
      aligned_bytes(N * E * sizeof(float)),
      exchanged ? std::max(aligned_bytes(A * C * sizeof(T)), aligned_bytes(R * C * sizeof(T))) : 0);
  // dgates, the origin's dout (A, C) under expert parallelism, dxe (R, C), the returned input
  // gradients (A, C) under expert parallelism, dp
  const std::size_t home = exchanged ? aligned_bytes(A * C * sizeof(T)) : 0;
  const std::size_t input = aligned_bytes(N * k * sizeof(float)) + home +
                            aligned_bytes(R * C * sizeof(T)) + home +
                            aligned_bytes(N * E * sizeof(float));
  // One at a time: a bias gradient's (matmul_backward_weight: OC floats, or where cuBLASLt
  // refuses the fused epilogue, bias_backward's partial sum per 256 rows of OC floats; OC ≤
  // max(H, C)), or the fp32 copy of x for the router's.
  const std::size_t widest = std::max(H, C);
  const std::size_t bias = aligned_bytes(widest * sizeof(float)) +
                           aligned_bytes((R + 255) / 256 * widest * sizeof(float));
  const std::size_t router = std::is_same_v<T, float> ? 0 : aligned_bytes(N * C * sizeof(float));
  return std::max({forward, input, bias, router});
}

template <class T>
std::size_t CudaMoeLayer<T>::scratch_bytes(int max_tokens) const {
  return scratch_bytes(C_, tp_size(), config_, max_tokens, ep_->size());
}

template <class T>
CudaMoeActivations<T> CudaMoeLayer<T>::activations(DeviceArena& arena, int max_tokens) const {
  STRATA_CHECK(max_tokens >= 1, "MoE activations for ", max_tokens, " tokens");
  return activations(arena.allocate(activation_bytes(max_tokens)), max_tokens);
}

template <class T>
CudaMoeActivations<T> CudaMoeLayer<T>::activations(void* base, int max_tokens) const {
  constexpr std::size_t align = DeviceArena::kDefaultAlignment;
  STRATA_CHECK(max_tokens >= 1, "MoE activations for ", max_tokens, " tokens");
  STRATA_CHECK(base != nullptr && reinterpret_cast<std::uintptr_t>(base) % align == 0,
               "MoE activations need a block at the arena's alignment of ", align, " bytes");
  CudaMoeActivations<T> a;
  a.max_tokens = max_tokens;
  char* next = static_cast<char*>(base);
  lay_out(a, static_cast<std::size_t>(max_tokens), static_cast<std::size_t>(config_.top_k),
          static_cast<std::size_t>(config_.experts), static_cast<std::size_t>(C_),
          static_cast<std::size_t>(H_), static_cast<std::size_t>(ep_->size()),
          [&](std::size_t count, std::size_t size) -> void* {
            void* at = next;
            next += aligned_bytes(count * size);
            return at;
          });
  return a;
}

template <class T>
const MoeStats& CudaMoeLayer<T>::forward(CudaMoeActivations<T>& a, const T* x, int N, int seq_len,
                                         const T* weights, T* y) {
  const int E = config_.experts, k = config_.top_k, C = C_, H = H_;
  STRATA_CHECK(N >= 1 && N <= a.max_tokens, "MoE layer: ", N, " tokens into activations for ",
               a.max_tokens);
  const std::size_t n = static_cast<std::size_t>(N);
  cudaStream_t stream = ctx_.stream();
  a.tokens = N;
  a.x = x;
  // Router: logits, probabilities, choices and gates per token, and the losses' totals.
  {
    ArenaScope scope(scratch_);
    float* logits = scratch_.allocate<float>(n * static_cast<std::size_t>(E));
    moe_router_forward(a.probs, a.lse, a.choices, a.gates, logits, x, weights + at_.router(), N, C,
                       E, k, stream);
  }
  moe_router_sums(a.router_sums, a.probs, a.lse, N, E, stream);
  // The one wait of the layer: the choices and totals on the host.
  a.host_choices.resize(n * static_cast<std::size_t>(k));
  a.host_sums.resize(static_cast<std::size_t>(E) + 1);
  STRATA_CUDA_CHECK(cudaMemcpyAsync(a.host_choices.data(), a.choices,
                                    a.host_choices.size() * sizeof(int), cudaMemcpyDeviceToHost,
                                    stream));
  STRATA_CUDA_CHECK(cudaMemcpyAsync(a.host_sums.data(), a.router_sums,
                                    a.host_sums.size() * sizeof(double), cudaMemcpyDeviceToHost,
                                    stream));
  STRATA_CUDA_CHECK(cudaStreamSynchronize(stream));
  // Capacity, the losses and the stats exactly as the CPU reference computes them.
  const int group = capacity_group_tokens(N, seq_len, config_.group_sequences);
  a.routing = route_tokens(a.host_choices.data(), N, k, E, group, config_.capacity(group));
  a.host_share = chosen_shares(a.host_choices.data(), N, k, E);
  MoeStats& stats = a.stats;
  stats = MoeStats{};
  for (int e = 0; e < E; ++e) {
    const std::size_t ue = static_cast<std::size_t>(e);
    stats.aux += E * a.host_share[ue] * a.host_sums[ue] / N;
  }
  stats.z = a.host_sums[static_cast<std::size_t>(E)] / N;
  stats.choices = static_cast<std::int64_t>(N) * k;
  stats.dropped = a.routing.dropped();
  for (int e = 0; e < E; ++e) stats.tokens_per_expert.push_back(a.routing.assigned(e));
  // Back to the device: the kept assignments and f_e (pageable copies: staged before returning).
  a.host_share_fp32.resize(a.host_share.size());
  for (std::size_t e = 0; e < a.host_share.size(); ++e)
    a.host_share_fp32[e] = static_cast<float>(a.host_share[e]);  // the CPU's static_cast<T>
  const std::size_t A = a.routing.assignments.size();
  if (A > 0)
    STRATA_CUDA_CHECK(cudaMemcpyAsync(a.assignments, a.routing.assignments.data(), A * sizeof(int),
                                      cudaMemcpyHostToDevice, stream));
  STRATA_CUDA_CHECK(cudaMemcpyAsync(a.chosen_share, a.host_share_fp32.data(),
                                    a.host_share_fp32.size() * sizeof(float),
                                    cudaMemcpyHostToDevice, stream));
  // Rows of the dropped choices stay −1 (all bits set).
  STRATA_CUDA_CHECK(
      cudaMemsetAsync(a.row, 0xff, n * static_cast<std::size_t>(k) * sizeof(int), stream));
  // The rows to their experts' members (counts first): without expert parallelism the gathered
  // rows are the experts' rows, in place.
  a.exchange = plan_moe_exchange(a.routing, *ep_);
  const std::size_t R = static_cast<std::size_t>(a.exchange.received());
  STRATA_CHECK(R <= static_cast<std::size_t>(ep_->size()) * a.max_tokens * k, "MoE layer: ", R,
               " rows received, activations for ", ep_->size() * a.max_tokens * k);
  if (!exchanges()) {
    moe_gather_rows(a.xe, a.row, x, a.assignments, static_cast<int>(A), k, C, stream);
  } else {
    ArenaScope scope(scratch_);
    T* rows = scratch_.allocate<T>(std::max<std::size_t>(A, 1) * C);
    moe_gather_rows(rows, a.row, x, a.assignments, static_cast<int>(A), k, C, stream);
    dispatch_rows(a.exchange, rows, a.xe);
  }
  // The experts held, each on its rows; GELU in the fc GEMM's epilogue, as the dense MLP's.
  ArenaScope scope(scratch_);
  T* out = exchanges() ? scratch_.allocate<T>(std::max<std::size_t>(R, 1) * C) : a.out;
  for (int j = 0; j < a.exchange.experts_per_member; ++j) {
    const int rows = a.exchange.expert_rows(j);
    if (rows == 0) continue;
    const std::size_t first =
        static_cast<std::size_t>(a.exchange.expert_offsets[static_cast<std::size_t>(j)]);
    matmul_forward(ctx_, a.act + first * H, a.pre + first * H, a.xe + first * C,
                   weights + at_.fc_weight(j), weights + at_.fc_bias(j), rows, C, H);
    matmul_forward(ctx_, out + first * C, static_cast<T*>(nullptr), a.act + first * H,
                   weights + at_.proj_weight(j),
                   bias_rank() ? weights + at_.proj_bias(j) : static_cast<const T*>(nullptr), rows,
                   H, C);
  }
  // The outputs come home, in the order their rows left.
  if (exchanges()) {
    combine_rows(a.exchange, out, a.out);
    stats.exchanged_rows = static_cast<std::int64_t>(a.exchange.rows_to_others(ep_->rank()) +
                                                     a.exchange.rows_from_others(ep_->rank()));
  }
  moe_combine_rows(y, a.out, a.gates, a.row, N, k, C, stream);
  return stats;
}

template <class T>
float CudaMoeLayer<T>::loss(const CudaMoeActivations<T>& a) const {
  return static_cast<float>(config_.aux_loss * a.stats.aux + config_.z_loss * a.stats.z);
}

template <class T>
void CudaMoeLayer<T>::backward_input(CudaMoeActivations<T>& a, const T* dy, float loss_scale,
                                     const T* weights, T* dx) {
  const int E = config_.experts, k = config_.top_k, C = C_, H = H_, N = a.tokens;
  const std::size_t n = static_cast<std::size_t>(N), A = a.routing.assignments.size();
  cudaStream_t stream = ctx_.stream();
  ArenaScope scope(scratch_);
  // Gates and expert outputs: dgate = dy_t · (the whole expert output), dout = gate · dy_t; a
  // dropped choice's dgate is 0.
  float* dgates = scratch_.allocate<float>(n * static_cast<std::size_t>(k));
  STRATA_CUDA_CHECK(
      cudaMemsetAsync(dgates, 0, n * static_cast<std::size_t>(k) * sizeof(float), stream));
  const std::size_t R = static_cast<std::size_t>(a.exchange.received());
  const std::size_t c = static_cast<std::size_t>(C);
  // The origin's dout (A, C): the experts' own array without expert parallelism, else staged
  // here and dispatched to the experts' members as the rows were.
  T* dout = exchanges() ? scratch_.allocate<T>(std::max<std::size_t>(A, 1) * c) : a.dout;
  moe_gate_grads(dgates, dout, dy, a.out, a.gates, a.assignments, static_cast<int>(A), k, C,
                 stream);
  // Each rank's dot covers its part of the output (rank 0's with the proj bias): the sum is the
  // whole output's.
  if (tp_ != nullptr && tp_->size() > 1) tp_->all_reduce_sum(dgates, n * k, stream);
  if (exchanges()) dispatch_rows(a.exchange, dout, a.dout);
  // The experts' input gradients; GELU's derivative in the proj input gradient's epilogue.
  T* dxe = R > 0 ? scratch_.allocate<T>(R * c) : nullptr;
  for (int j = 0; j < a.exchange.experts_per_member; ++j) {
    const int rows = a.exchange.expert_rows(j);
    if (rows == 0) continue;
    const std::size_t first =
        static_cast<std::size_t>(a.exchange.expert_offsets[static_cast<std::size_t>(j)]);
    matmul_backward_input(ctx_, a.dpre + first * H, a.dout + first * C,
                          weights + at_.proj_weight(j), a.pre + first * H, rows, H, C);
    matmul_backward_input(ctx_, dxe + first * C, a.dpre + first * H, weights + at_.fc_weight(j),
                          static_cast<const T*>(nullptr), rows, C, H);
  }
  // The input gradients come home (A, C), in the order their rows left.
  const T* dinput = dxe;
  if (exchanges()) {
    T* home = scratch_.allocate<T>(std::max<std::size_t>(A, 1) * c);
    combine_rows(a.exchange, dxe, home);
    dinput = home;
  }
  // The router: the gates' gradient, the aux loss's (through P_e) and the z-loss's, with the
  // CPU reference's scales (computed in double from the fp32 loss scale, rounded to fp32).
  const float aux_scale = static_cast<float>(loss_scale * config_.aux_loss * E / N);
  const float z_scale = static_cast<float>(loss_scale * config_.z_loss * 2.0 / N);
  float* dp = scratch_.allocate<float>(n * static_cast<std::size_t>(E));
  moe_router_grads(a.dlogits, dp, a.probs, a.lse, a.choices, a.gates, dgates, a.chosen_share,
                   aux_scale, z_scale, N, E, k, stream);
  // dx: the router's part (rank 0) and each token's experts' input gradients, in choice order.
  moe_input_grads(dx, a.dlogits, bias_rank() ? weights + at_.router() : nullptr, dinput, a.row, N,
                  k, E, C, stream);
}

template <class T>
void CudaMoeLayer<T>::backward_weight(CudaMoeActivations<T>& a, float* dweights, int own_begin,
                                      int own_count) {
  const int E = config_.experts, C = C_, H = H_;
  STRATA_CHECK(own_begin >= 0 && own_count >= 0 && own_begin + own_count <= a.tokens,
               "MoE layer: own tokens [", own_begin, ", ", own_begin + own_count, ") of ",
               a.tokens);
  cudaStream_t stream = ctx_.stream();
  // The replicated proj biases count each expert row once over the tensor-parallel group: every
  // row on the rank whose own rows start at 0 (every rank without sequence parallelism, tp rank 0
  // with it), as the CPU reference does; expert rows mix several ranks' tokens under sequence
  // parallelism, so no rank could tell its share apart.
  const bool bias_rows = own_begin == 0;
  for (int j = 0; j < a.exchange.experts_per_member; ++j) {
    const int rows = a.exchange.expert_rows(j);
    if (rows == 0) continue;
    const std::size_t first =
        static_cast<std::size_t>(a.exchange.expert_offsets[static_cast<std::size_t>(j)]);
    matmul_backward_weight(ctx_, dweights + at_.proj_weight(j),
                           bias_rows ? dweights + at_.proj_bias(j) : nullptr, a.dout + first * C,
                           a.act + first * H, rows, H, C, scratch_);
    matmul_backward_weight(ctx_, dweights + at_.fc_weight(j), dweights + at_.fc_bias(j),
                           a.dpre + first * H, a.xe + first * C, rows, C, H, scratch_);
  }
  // The router over this rank's tokens: dWr (E, C) += dlogitsᵀ · x in exact fp32.
  if (own_count == 0) return;
  ArenaScope scope(scratch_);
  const std::size_t own = static_cast<std::size_t>(own_begin);
  const T* x_own = a.x + own * C;
  const float* x_fp32 = nullptr;
  if constexpr (std::is_same_v<T, float>) {
    x_fp32 = x_own;
  } else {
    float* copy = scratch_.allocate<float>(static_cast<std::size_t>(own_count) * C);
    cast(copy, x_own, static_cast<long>(own_count) * C, stream);
    x_fp32 = copy;
  }
  ExactFp32 exact(ctx_);
  matmul_backward_weight(ctx_, dweights + at_.router(), static_cast<float*>(nullptr),
                         a.dlogits + own * E, x_fp32, own_count, C, E, scratch_);
}

template struct CudaMoeActivations<float>;
template struct CudaMoeActivations<__nv_bfloat16>;
template struct CudaMoeActivations<__half>;
template class CudaMoeLayer<float>;
template class CudaMoeLayer<__nv_bfloat16>;
template class CudaMoeLayer<__half>;

}  // namespace strata::cuda
