// What every backend's ops object shares: the names an op call uses for choices that are not
// plain shapes, and the one list of op signatures both backends must have.
//
// A model's passes call one ops object (CpuOps<T>, model/ops/cpu_ops.h; CudaOps<T> on a GPU) whose
// ops each round their own outputs, so the passes themselves contain no rounding. An ops class
// names its types:
//   Value   activations, activation gradients, weights (the compute dtype's storage type)
//   Grad    parameter gradients (CPU: T; CUDA: fp32)
//   Stat    LayerNorm statistics, attention logsumexps, losses and the cross-entropy's row
//           statistics (CPU: T; CUDA: fp32)
//   Scalar  the loss scale
//   Ids     token ids
// and OpsSignatures<Ops> below spells every op in those types once: STRATA_CHECK_GPT_OPS(Ops)
// asserts, op by op, that a backend declares exactly that signature, so the two backends' ops
// agree argument for argument. The mixture-of-experts ops (moe_*) are the steps of one MoE MLP
// (model/moe/moe_mlp.h); they also name `int` arrays (choices, rows, assignments) and the host's
// routing types (model/moe/moe_routing.h, moe_exchange.h). The LayerNorm ops take the model's
// eps (model.norm_eps) after N, C, and pass null bias pointers (bias, y_bias, dbias: a model
// without biases, model.bias: false) through to their kernels, which then add, or sum, no bias.
// The norms' forwards end with `cast_for`, the FP8 GEMM (Fp8Gemm) that reads their output next
// (empty: none), which a backend may cast in the same pass (CudaOps under the delayed recipe).
#pragma once

#include <cstddef>
#include <type_traits>
#include <vector>

#include "model/fp8/fp8_recipe.h"
#include "model/kernels/attention_pair.h"
#include "model/kernels/rope.h"

namespace strata {

class Collectives;
class Fp8State;
struct MoeRouting;
struct MoeExchange;

inline constexpr double kGpt2NormEps = 1e-5;  // GPT-2's LayerNorm ε (model.norm_eps's default)

// What a linear layer's forward does after its product, out = inp·Wᵀ (+ bias).
enum class Epilogue {
  bias,       // out = inp·Wᵀ + bias (bias may be null)
  gelu,       // pre_gelu = inp·Wᵀ + bias, out = gelu(pre_gelu). CPU: the bias folded into the
              // product, rounded, GELU, rounded (the MoE experts' order)
  bias_gelu,  // the same function. CPU: a bias-free product, then bias, rounding, GELU and
              // rounding in one pass (bias_gelu_forward, the dense MLP's order). The two CPU
              // orders differ in the last bits (kernels/cpu/gelu.h), hence two names.
};

// One linear layer's FP8 (precision.fp8; model/fp8/): the model's scaling state, the block (its
// index in the model) and which of its GEMMs. A null state multiplies in the compute dtype. The
// ops cast each operand as the recipe says and reduce its amaxes over the ranks that hold parts
// of the same rows or columns: `row_parallel`, the layer's input channels are split over the
// tensor-parallel group (the projections), else its output channels are (qkv and fc); rows of a
// micro-batch are split over the context-parallel group.
struct Fp8Gemm {
  Fp8State* state = nullptr;
  int layer = 0;
  Fp8Layer gemm = Fp8Layer::qkv;
  bool row_parallel = false;
  explicit operator bool() const { return state != nullptr; }
};

// Rows [begin, begin + count) of a row-parallel layer's output gradient: the ones whose sum a
// replicated bias gradient takes on this rank (all N rows without sequence parallelism).
struct RowRange {
  int begin = 0, count = 0;
};

// This rank's rows of the vocabulary-parallel embedding table and tied head: global ids
// [begin, begin + rows) of the padded vocabulary; ids >= vocab_size are padding.
struct VocabShard {
  int begin = 0, rows = 0, vocab_size = 0;
};

// Which way an MoE exchange moves rows (model/moe/moe_exchange.h): from the tokens' rank to the
// experts' members (dispatch), or back (combine).
enum class RowExchange { dispatch, combine };

// What the host's capacity rule reads after the MoE router (moe_router_to_host): the choices (N, k)
// in host memory (valid until the next call of the op), Σ_t p_te per expert (E) and the z-loss
// (mean over the tokens of lse²), each summed in its backend's order.
struct MoeRouterHost {
  const int* choices = nullptr;
  std::vector<double> prob_sums;
  double z = 0;
};

// The member-function type of every op, in the ops class's own types (see the header comment).
template <class Ops>
struct OpsSignatures {
  using V = typename Ops::Value;
  using G = typename Ops::Grad;
  using S = typename Ops::Stat;
  using Sc = typename Ops::Scalar;
  using I = typename Ops::Ids;
  using sum_rows = const V* (Ops::*)(V*, V*, int, int);
  using gather_rows = const V* (Ops::*)(const V*, V*, int, int);
  using gather_rows_into = void (Ops::*)(const V*, V*, int, int);
  using matmul_forward = void (Ops::*)(V*, V*, const V*, const V*, const V*, int, int, int,
                                       Epilogue, const Fp8Gemm&);
  using matmul_backward_input = void (Ops::*)(V*, const V*, const V*, const V*, int, int, int,
                                              const Fp8Gemm&);
  using matmul_backward_weight = void (Ops::*)(G*, G*, const V*, const V*, int, int, int,
                                               const Fp8Gemm&);
  using matmul_backward_weight_rows = void (Ops::*)(G*, G*, const V*, const V*, int, int, int,
                                                    RowRange, const Fp8Gemm&);
  using gelu_forward = void (Ops::*)(V*, const V*, long);
  using gelu_backward = void (Ops::*)(V*, const V*, const V*, long);
  // The Llama block's (model/gpt_architecture.h): RMSNorm, SwiGLU, RoPE.
  using rmsnorm_forward = void (Ops::*)(V*, S*, const V*, const V*, int, int, double,
                                        const Fp8Gemm&);
  using residual_rmsnorm_forward = void (Ops::*)(V*, V*, S*, const V*, const V*, const V*, const V*,
                                                 int, int, double, const Fp8Gemm&);
  using rmsnorm_backward_input = void (Ops::*)(V*, const V*, const V*, const V*, const S*, int,
                                               int);
  using rmsnorm_backward_weight = void (Ops::*)(G*, const V*, const V*, const S*, int, int);
  using swiglu_forward = void (Ops::*)(V*, const V*, int, int);
  using swiglu_backward = void (Ops::*)(V*, const V*, const V*, int, int);
  using rope_forward = void (Ops::*)(V*, const RopeLayout&);
  using rope_backward = void (Ops::*)(V*, const RopeLayout&);
  using layernorm_forward = void (Ops::*)(V*, S*, S*, const V*, const V*, const V*, int, int,
                                          double, const Fp8Gemm&);
  using residual_layernorm_forward = void (Ops::*)(V*, V*, S*, S*, const V*, const V*, const V*,
                                                   const V*, const V*, int, int, double,
                                                   const Fp8Gemm&);
  using layernorm_backward_input = void (Ops::*)(V*, const V*, const V*, const V*, const S*,
                                                 const S*, int, int);
  using layernorm_backward_weight = void (Ops::*)(G*, G*, const V*, const V*, const S*, const S*,
                                                  int, int);
  using residual_bias_forward = void (Ops::*)(V*, const V*, const V*, const V*, int, int);
  using attention_forward = void (Ops::*)(V*, S*, const V*, int, int, int, int, int);
  using attention_backward = void (Ops::*)(V*, const V*, const V*, const V*, const S*, int, int,
                                           int, int, int);
  using attention_forward_rows = void (Ops::*)(V*, const V*, int, int, int, int, int);
  using embedding_forward = void (Ops::*)(V*, const I*, const V*, VocabShard, int, int);
  using embedding_backward = void (Ops::*)(G*, const V*, const I*, VocabShard, int, int);
  using position_embedding_forward = void (Ops::*)(V*, const V*, long, int, int, int);
  using position_embedding_backward = void (Ops::*)(G*, const V*, long, int, int, int);
  using cross_entropy_forward = void (Ops::*)(S*, S*, V*, const I*, VocabShard, int);
  using cross_entropy_backward = void (Ops::*)(S*, const S*, V*, const I*, Sc, VocabShard, int);
  using cross_entropy_forward_backward = void (Ops::*)(S*, S*, V*, const I*, Sc, VocabShard, int);
  // Mixture of experts (model/moe/moe_mlp.h drives them in this order).
  using moe_router_forward = void (Ops::*)(S*, S*, int*, S*, const V*, const V*, int, int, int,
                                           int);
  using moe_router_to_host = MoeRouterHost (Ops::*)(const int*, const S*, const S*, int, int, int);
  using moe_routing_to_device = void (Ops::*)(int*, S*, const MoeRouting&,
                                              const std::vector<double>&);
  using moe_gather_rows = void (Ops::*)(V*, int*, const V*, const int*, int, int, int, int);
  using moe_exchange_rows = void (Ops::*)(RowExchange, const MoeExchange&, Collectives&, const V*,
                                          V*, int);
  using moe_combine_rows = void (Ops::*)(V*, const V*, const S*, const int*, int, int, int);
  using moe_gate_grads = void (Ops::*)(S*, V*, const V*, const V*, const S*, const int*, int, int,
                                       int, int);
  using moe_router_grads = void (Ops::*)(S*, const S*, const S*, const int*, const S*, const S*,
                                         const S*, S, S, int, int, int);
  using moe_input_grads = void (Ops::*)(V*, const S*, const V*, const V*, const int*, int, int, int,
                                        int);
  using moe_router_weight_grad = void (Ops::*)(G*, const S*, const V*, int, int, int);
};

#define STRATA_CHECK_GPT_OP(Ops, op)                                                           \
  static_assert(std::is_same_v<decltype(&Ops::op), typename ::strata::OpsSignatures<Ops>::op>, \
                #Ops "::" #op " differs from its signature in model/ops/ops.h")

// Every op of OpsSignatures, declared by `Ops` with exactly that signature; and the copies and
// the MoE's temporaries (moe_scratch: an object whose take<U>(n) lasts as long as it does).
#define STRATA_CHECK_GPT_OPS(Ops)                                                           \
  STRATA_CHECK_GPT_OP(Ops, sum_rows);                                                       \
  STRATA_CHECK_GPT_OP(Ops, gather_rows);                                                    \
  STRATA_CHECK_GPT_OP(Ops, gather_rows_into);                                               \
  STRATA_CHECK_GPT_OP(Ops, matmul_forward);                                                 \
  STRATA_CHECK_GPT_OP(Ops, matmul_backward_input);                                          \
  STRATA_CHECK_GPT_OP(Ops, matmul_backward_weight);                                         \
  STRATA_CHECK_GPT_OP(Ops, matmul_backward_weight_rows);                                    \
  STRATA_CHECK_GPT_OP(Ops, gelu_forward);                                                   \
  STRATA_CHECK_GPT_OP(Ops, gelu_backward);                                                  \
  STRATA_CHECK_GPT_OP(Ops, rmsnorm_forward);                                                \
  STRATA_CHECK_GPT_OP(Ops, residual_rmsnorm_forward);                                       \
  STRATA_CHECK_GPT_OP(Ops, rmsnorm_backward_input);                                         \
  STRATA_CHECK_GPT_OP(Ops, rmsnorm_backward_weight);                                        \
  STRATA_CHECK_GPT_OP(Ops, swiglu_forward);                                                 \
  STRATA_CHECK_GPT_OP(Ops, swiglu_backward);                                                \
  STRATA_CHECK_GPT_OP(Ops, rope_forward);                                                   \
  STRATA_CHECK_GPT_OP(Ops, rope_backward);                                                  \
  STRATA_CHECK_GPT_OP(Ops, layernorm_forward);                                              \
  STRATA_CHECK_GPT_OP(Ops, residual_layernorm_forward);                                     \
  STRATA_CHECK_GPT_OP(Ops, layernorm_backward_input);                                       \
  STRATA_CHECK_GPT_OP(Ops, layernorm_backward_weight);                                      \
  STRATA_CHECK_GPT_OP(Ops, residual_bias_forward);                                          \
  STRATA_CHECK_GPT_OP(Ops, attention_forward);                                              \
  STRATA_CHECK_GPT_OP(Ops, attention_backward);                                             \
  STRATA_CHECK_GPT_OP(Ops, attention_forward_rows);                                         \
  STRATA_CHECK_GPT_OP(Ops, embedding_forward);                                              \
  STRATA_CHECK_GPT_OP(Ops, embedding_backward);                                             \
  STRATA_CHECK_GPT_OP(Ops, position_embedding_forward);                                     \
  STRATA_CHECK_GPT_OP(Ops, position_embedding_backward);                                    \
  STRATA_CHECK_GPT_OP(Ops, cross_entropy_forward);                                          \
  STRATA_CHECK_GPT_OP(Ops, cross_entropy_backward);                                         \
  STRATA_CHECK_GPT_OP(Ops, cross_entropy_forward_backward);                                 \
  STRATA_CHECK_GPT_OP(Ops, moe_router_forward);                                             \
  STRATA_CHECK_GPT_OP(Ops, moe_router_to_host);                                             \
  STRATA_CHECK_GPT_OP(Ops, moe_routing_to_device);                                          \
  STRATA_CHECK_GPT_OP(Ops, moe_gather_rows);                                                \
  STRATA_CHECK_GPT_OP(Ops, moe_exchange_rows);                                              \
  STRATA_CHECK_GPT_OP(Ops, moe_combine_rows);                                               \
  STRATA_CHECK_GPT_OP(Ops, moe_gate_grads);                                                 \
  STRATA_CHECK_GPT_OP(Ops, moe_router_grads);                                               \
  STRATA_CHECK_GPT_OP(Ops, moe_input_grads);                                                \
  STRATA_CHECK_GPT_OP(Ops, moe_router_weight_grad);                                         \
  static_assert(                                                                            \
      requires(Ops & ops, typename Ops::Value * v, typename Ops::Stat * s, std::size_t n) { \
        ops.copy(v, static_cast<const typename Ops::Value*>(v), n);                         \
        ops.copy(s, static_cast<const typename Ops::Stat*>(s), n);                          \
        ops.zero(v, n);                                                                     \
        ops.moe_scratch().template take<typename Ops::Stat>(n);                             \
      },                                                                                    \
      #Ops " lacks copy, zero or moe_scratch")

}  // namespace strata
