// CudaMoeLayer (moe_layer_cuda.h): the activations' device layout, the bytes a model reserves,
// and MoeMlp instantiated for the CUDA ops (its passes are model/moe/moe_mlp_impl.h, its steps
// model/moe/cuda_moe_ops.cu).
#include "model/moe/moe_layer_cuda.h"

#include <algorithm>
#include <cstdint>
#include <type_traits>

#include "model/core/error.h"
#include "model/moe/moe_mlp_impl.h"

namespace strata::cuda {
namespace {

std::size_t aligned_bytes(std::size_t bytes) {
  constexpr std::size_t align = DeviceArena::kDefaultAlignment;
  return (bytes + align - 1) / align * align;
}

// The activation arrays for N tokens (H hidden columns held, Fc columns of the fc product: H, or
// SwiGLU's 2H), each from take(count, element bytes): run once to count the bytes, once to
// allocate.
template <class T, class Take>
void lay_out(CudaMoeActivations<T>& a, std::size_t N, std::size_t k, std::size_t E, std::size_t C,
             std::size_t H, std::size_t Fc, std::size_t P, Take&& take) {
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
  array(a.share, E);
  array(a.xe, R * C);
  array(a.out, A * C);
  array(a.pre, R * Fc);
  array(a.act, R * H);
  array(a.dout, R * C);
  array(a.dpre, R * Fc);
  array(a.dlogits, N * E);
}

}  // namespace

template <class T>
void CudaMoeActivations<T>::check_tokens(int N) const {
  STRATA_CHECK(N >= 1 && N <= max_tokens, "MoE layer: ", N, " tokens into activations for ",
               max_tokens);
}

template <class T>
void CudaMoeActivations<T>::check_expert_rows(std::size_t R, int members, int k) const {
  const std::size_t room = static_cast<std::size_t>(members) * max_tokens * k;
  STRATA_CHECK(R <= room, "MoE layer: ", R, " rows received, activations for ", room);
}

template <class T>
std::size_t CudaMoeLayer<T>::activation_bytes(const MoeExpertShape& experts, int tp_size,
                                              const MoeConfig& config, int max_tokens,
                                              int ep_size) {
  std::size_t bytes = 0;
  CudaMoeActivations<T> a;
  lay_out(a, static_cast<std::size_t>(max_tokens), static_cast<std::size_t>(config.top_k),
          static_cast<std::size_t>(config.experts), static_cast<std::size_t>(experts.d_model),
          static_cast<std::size_t>(experts.ffn_width / tp_size),
          static_cast<std::size_t>(experts.fc_width() / tp_size), static_cast<std::size_t>(ep_size),
          [&](std::size_t count, std::size_t size) -> void* {
            bytes += aligned_bytes(count * size);
            return nullptr;
          });
  return bytes;
}

template <class T>
std::size_t CudaMoeLayer<T>::activation_bytes(int max_tokens) const {
  return activation_bytes(this->expert_shape(), this->tp_size(), this->config(), max_tokens,
                          this->expert_members());
}

template <class T>
std::size_t CudaMoeLayer<T>::scratch_bytes(const MoeExpertShape& experts, int tp_size,
                                           const MoeConfig& config, int max_tokens, int ep_size) {
  const std::size_t N = static_cast<std::size_t>(max_tokens);
  const std::size_t k = static_cast<std::size_t>(config.top_k);
  const std::size_t E = static_cast<std::size_t>(config.experts);
  const std::size_t C = static_cast<std::size_t>(experts.d_model);
  const std::size_t H = static_cast<std::size_t>(experts.ffn_width / tp_size);
  const std::size_t Fc = static_cast<std::size_t>(experts.fc_width() / tp_size);
  const std::size_t A = N * k, R = static_cast<std::size_t>(ep_size) * A;  // as lay_out's
  const bool exchanged = ep_size > 1;
  // The logits, the router's sums (E + 1 doubles), then under expert parallelism the gathered
  // rows (A, C) before the dispatch and the experts' outputs (R, C) before the combine.
  const std::size_t forward = std::max(
      {aligned_bytes(N * E * sizeof(float)), aligned_bytes((E + 1) * sizeof(double)),
       exchanged ? std::max(aligned_bytes(A * C * sizeof(T)), aligned_bytes(R * C * sizeof(T)))
                 : 0});
  // dgates, the origin's dout (A, C) under expert parallelism, dxe (R, C), SwiGLU's dact (R, H),
  // the returned input gradients (A, C) under expert parallelism, dp
  const std::size_t home = exchanged ? aligned_bytes(A * C * sizeof(T)) : 0;
  const std::size_t dact = experts.swiglu ? aligned_bytes(R * H * sizeof(T)) : 0;
  const std::size_t input = aligned_bytes(N * k * sizeof(float)) + home +
                            aligned_bytes(R * C * sizeof(T)) + dact + home +
                            aligned_bytes(N * E * sizeof(float));
  // One at a time: a bias gradient's (matmul_backward_weight: OC floats, or where cuBLASLt
  // refuses the fused epilogue, bias_backward's partial sum per 256 rows of OC floats; OC ≤
  // max(Fc, C)), or the fp32 copy of x for the router's.
  const std::size_t widest = std::max(Fc, C);
  const std::size_t bias = aligned_bytes(widest * sizeof(float)) +
                           aligned_bytes((R + 255) / 256 * widest * sizeof(float));
  const std::size_t router = std::is_same_v<T, float> ? 0 : aligned_bytes(N * C * sizeof(float));
  return std::max({forward, input, bias, router});
}

template <class T>
std::size_t CudaMoeLayer<T>::scratch_bytes(int max_tokens) const {
  return scratch_bytes(this->expert_shape(), this->tp_size(), this->config(), max_tokens,
                       this->expert_members());
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
  lay_out(a, static_cast<std::size_t>(max_tokens), static_cast<std::size_t>(this->config().top_k),
          static_cast<std::size_t>(this->config().experts),
          static_cast<std::size_t>(this->d_model()), static_cast<std::size_t>(this->hidden()),
          static_cast<std::size_t>(this->expert_shape().fc_width() / this->tp_size()),
          static_cast<std::size_t>(this->expert_members()),
          [&](std::size_t count, std::size_t size) -> void* {
            void* at = next;
            next += aligned_bytes(count * size);
            return at;
          });
  return a;
}

template struct CudaMoeActivations<float>;
template struct CudaMoeActivations<__nv_bfloat16>;
template struct CudaMoeActivations<__half>;
template class CudaMoeLayer<float>;
template class CudaMoeLayer<__nv_bfloat16>;
template class CudaMoeLayer<__half>;

}  // namespace strata::cuda

namespace strata {
STRATA_INSTANTIATE_MOE_MLP(cuda::CudaOps<float>)
STRATA_INSTANTIATE_MOE_MLP(cuda::CudaOps<__nv_bfloat16>)
STRATA_INSTANTIATE_MOE_MLP(cuda::CudaOps<__half>)
}  // namespace strata
