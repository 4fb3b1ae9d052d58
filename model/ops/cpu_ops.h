// CpuOps<T>: the CPU's ops for the GPT block's passes (T = float, or double for the
// finite-difference reference), over the reference kernels of model/kernels/cpu.
//
// Each op runs its kernels and then rounds every activation (or activation gradient) it writes to
// the compute dtype, as a bf16/fp16 kernel would store it (kernels/cpu/precision.h): the rounding
// that Gpt<T> did between kernel calls now belongs to the op that produced the value, on the same
// range, in the same order, so results are bitwise those of the kernel sequence. Nothing is
// rounded in fp32, nor are statistics (LayerNorm mean/rstd) or parameter gradients, which
// accumulate in T. Shapes: N rows, IC/OC a linear layer's in/out channels ([out, in] weights),
// C channels, B·T_ = N rows of attention with NH heads.
//
// The tensor-parallel row collectives (gpt.h: "[sum]" and "[gather rows]") are ops too, over the
// group the ops were built with; they round nothing (a sum of rounded partials stays in T, as a
// kernel summing in its accumulator would leave it before its own output's rounding).
//
// One object serves one model: it owns attention's and the cross-entropy's scratch, which two
// calls must not share at once (kernels/cpu/attention.h). It stays movable: the one-rank group it
// makes when given none lives on the heap.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "model/core/collectives.h"
#include "model/kernels/cpu/precision.h"
#include "model/ops/host_reservation.h"
#include "model/ops/ops.h"

namespace strata {

template <class T>
class CpuOps {
 public:
  using Value = T;   // activations, activation gradients, weights
  using Grad = T;    // parameter gradients
  using Stat = T;    // LayerNorm statistics
  using Scalar = T;  // loss scale, losses
  using Ids = std::int32_t;
  using Reservation = HostReservation;  // where a model lays out its activations
  // Attention statistics kept per (row, head) for the backward: the log-sum-exp.
  static constexpr long kLsePerRow = 1;
  // The cross-entropy's statistics kept per row for the backward: none, the forward leaves the
  // softmax probabilities in place of the logits instead.
  static constexpr long kCrossEntropyStatsPerRow = 0;
  // The group context parallelism's attention moves its K/V blocks over (group_* below).
  using Group = Collectives;

  // `tp`: the tensor-parallel group (not owned); null for one rank. `sequence_parallel`: the rows
  // of the residual stream are split over the group (only meaningful with more than one rank).
  // `cp`: the context-parallel group (not owned; null for one rank), over which FP8 casts reduce
  // the amaxes of a micro-batch's rows.
  explicit CpuOps(cpu::ComputeDtype compute, Collectives* tp = nullptr,
                  bool sequence_parallel = false, Collectives* cp = nullptr);
  cpu::ComputeDtype compute() const { return compute_; }
  int tp_rank() const { return tp_->rank(); }
  int tp_size() const { return tp_->size(); }
  bool sequence_parallel() const { return sequence_parallel_; }

  // Tensor-parallel rows of (N, C) activations, N = B·T over the whole group. sum_rows: the
  // partial results of every rank summed into this rank's rows (all-reduce in place, returning
  // `partial`; with sequence parallelism reduce-scatter into `local_out`, returning it).
  // gather_rows: this rank's rows to all N rows (all-gather into `full`; without sequence
  // parallelism `local` itself is every row and is returned). gather_rows_into: the same, into
  // `full` always (a copy without sequence parallelism).
  const Value* sum_rows(Value* partial, Value* local_out, int N, int C);
  const Value* gather_rows(const Value* local, Value* full, int N, int C);
  void gather_rows_into(const Value* local, Value* full, int N, int C);
  template <class U>
  void copy(U* to, const U* from, std::size_t n) {
    std::copy_n(from, n, to);
  }
  template <class U>
  void zero(U* data, std::size_t n) {
    std::fill_n(data, n, U(0));
  }

  // data[0, n) rounded to the compute dtype in place; nothing in fp32.
  void round_to_compute(Value* data, long n) const;

  // Linear layers, out (N, OC) = inp (N, IC)·weightᵀ + bias; bias may be null. `bias`: out
  // rounded, pre_gelu unused (null). `gelu`/`bias_gelu`: pre_gelu (N, OC) = the product with its
  // bias, out = gelu(pre_gelu), both rounded (ops.h says where each adds the bias).
  // With `fp8` (ops.h Fp8Gemm), each GEMM is emulated as an FP8 tensor core runs it: its two
  // operands cast to FP8 and back (fp8_cast below), then multiplied in T; the bias gradient sums
  // the unquantised dout, as a fused cast-and-bias-gradient kernel would.
  void matmul_forward(Value* out, Value* pre_gelu, const Value* inp, const Value* weight,
                      const Value* bias, int N, int IC, int OC, Epilogue epilogue,
                      const Fp8Gemm& fp8);
  // dinp (N, IC) = dout·weight, overwritten and rounded. With pre_gelu (N, IC) (the forward's
  // GELU input): dinp = gelu'(pre_gelu) ⊙ (dout·weight), the product rounded first, as the GELU
  // had its own kernel.
  void matmul_backward_input(Value* dinp, const Value* dout, const Value* weight,
                             const Value* pre_gelu, int N, int IC, int OC, const Fp8Gemm& fp8);
  // dweight (OC, IC) += doutᵀ·inp, dbias (OC) += Σ_n dout (may be null); not rounded.
  void matmul_backward_weight(Grad* dweight, Grad* dbias, const Value* dout, const Value* inp,
                              int N, int IC, int OC, const Fp8Gemm& fp8);
  // A row-parallel layer: dweight over all N rows, its replicated bias over `bias_rows` only,
  // summed row by row first (bias_backward: not the bits of matmul_backward_weight's column sums).
  void matmul_backward_weight_rows(Grad* dweight, Grad* dbias, const Value* dout, const Value* inp,
                                   int N, int IC, int OC, RowRange bias_rows, const Fp8Gemm& fp8);

  // GELU on its own (the MLP's fused forward is matmul_forward's epilogue): out rounded; the
  // backward dinp = gelu'(inp)·dout, rounded.
  void gelu_forward(Value* out, const Value* inp, long n);
  void gelu_backward(Value* dinp, const Value* inp, const Value* dout, long n);
  // RMSNorm (kernels/cpu/rmsnorm.h), as LayerNorm's ops below: out rounded, rstd (N) as computed;
  // the residual form's sum_out and out rounded; dinp (N, C) += ..., then rounded; dweight (C)
  // += ..., not rounded. The norms' `cast_for` (the FP8 GEMM that reads `out` next, which the
  // CUDA backend may cast in the same pass) changes nothing here: the GEMM's emulation casts the
  // same stored values.
  void rmsnorm_forward(Value* out, Stat* rstd, const Value* inp, const Value* weight, int N, int C,
                       double eps, const Fp8Gemm& cast_for);
  void residual_rmsnorm_forward(Value* sum_out, Value* out, Stat* rstd, const Value* residual,
                                const Value* y, const Value* y_bias, const Value* weight, int N,
                                int C, double eps, const Fp8Gemm& cast_for);
  void rmsnorm_backward_input(Value* dinp, const Value* dout, const Value* inp, const Value* weight,
                              const Stat* rstd, int N, int C);
  void rmsnorm_backward_weight(Grad* dweight, const Value* dout, const Value* inp, const Stat* rstd,
                               int N, int C);
  // SwiGLU (kernels/cpu/swiglu.h): out (N, F) from h (N, 2F) = [gate | up] rows, rounded; the
  // backward overwrites dh (N, 2F), rounded.
  void swiglu_forward(Value* out, const Value* h, int N, int F);
  void swiglu_backward(Value* dh, const Value* dout, const Value* h, int N, int F);
  // RoPE (kernels/cpu/rope.h) in place on the layout's rows, which are rounded again (the turned
  // heads; the rest of a row was rounded already and stays as it is).
  void rope_forward(Value* qkv, const RopeLayout& layout);
  void rope_backward(Value* dqkv, const RopeLayout& layout);

  // LayerNorm (kernels/cpu/layernorm.h; eps the model's, model.norm_eps): out rounded, mean and
  // rstd (N) as computed. bias may be null (no bias).
  void layernorm_forward(Value* out, Stat* mean, Stat* rstd, const Value* inp, const Value* weight,
                         const Value* bias, int N, int C, double eps, const Fp8Gemm& cast_for);
  // sum_out = residual + (y + y_bias), out = LayerNorm(sum_out): both rounded (one fused pass).
  // y_bias and bias may be null (no bias).
  void residual_layernorm_forward(Value* sum_out, Value* out, Stat* mean, Stat* rstd,
                                  const Value* residual, const Value* y, const Value* y_bias,
                                  const Value* weight, const Value* bias, int N, int C, double eps,
                                  const Fp8Gemm& cast_for);
  // dinp (N, C) += the input gradient, then dinp rounded (all of it: it is the running residual
  // gradient, rounded after each addition).
  void layernorm_backward_input(Value* dinp, const Value* dout, const Value* inp,
                                const Value* weight, const Stat* mean, const Stat* rstd, int N,
                                int C);
  // dweight, dbias (C) += ...; not rounded. dbias may be null (no bias gradient).
  void layernorm_backward_weight(Grad* dweight, Grad* dbias, const Value* dout, const Value* inp,
                                 const Stat* mean, const Stat* rstd, int N, int C);

  // out (N, C) = x + (y + bias), rounded; bias may be null; out may alias x.
  void residual_bias_forward(Value* out, const Value* x, const Value* y, const Value* bias, int N,
                             int C);

  // Causal attention on packed qkv (B·T_, C3) → out (B·T_, C), rounded, NH query heads over KV
  // key/value heads (C3 = C + 2·KV·C/NH: kernels/cpu/attention.h); lse (B, NH, T_): each row's
  // log-sum-exp, kept for the backward. The backward recomputes the probabilities from qkv and
  // lse, rounded to the compute dtype as the forward had written them, takes its row terms from
  // out, and overwrites dqkv (rounded).
  void attention_forward(Value* out, Stat* lse, const Value* qkv, int B, int T_, int C, int NH,
                         int KV);
  void attention_backward(Value* dqkv, const Value* dout, const Value* qkv, const Value* out,
                          const Stat* lse, int B, int T_, int C, int NH, int KV);
  // Context parallelism's steps (model/context_attention.h), on the chunk pairs of
  // kernels/cpu/attention.h: a pair's partial attention (out and lse overwritten, not rounded), the
  // merge of a second partial into the first, the backward's row terms delta = rowsum(dout ⊙ out),
  // and a pair's gradients added into dq, dk and dv (not rounded; the probabilities rounded as in
  // attention_backward). copy_columns: columns [0, cols) of `rows` rows from src (row stride
  // src_row) to dst (dst_row). CudaOps has them too; they are not in STRATA_CHECK_GPT_OPS (their
  // Group differs: host or device collectives).
  void attention_pair_forward(Value* out, Stat* lse, const Value* q, const Value* k, const Value* v,
                              const AttentionPair& pair);
  void attention_merge(Value* out, Stat* lse, const Value* part, const Stat* part_lse,
                       const AttentionPair& pair);
  void attention_delta(Stat* delta, const Value* dout, const Value* out, const AttentionPair& pair);
  void attention_pair_backward(Value* dq, Value* dk, Value* dv, const Value* dout, const Stat* lse,
                               const Stat* delta, const Value* q, const Value* k, const Value* v,
                               const AttentionPair& pair);
  void copy_columns(Value* dst, long dst_row, const Value* src, long src_row, long rows, int cols);
  // The K/V blocks' collectives over the context-parallel group (model/core/collectives.h).
  void group_all_gather(Group& group, const Value* in, Value* out, std::size_t n) {
    group.all_gather(in, out, n);
  }
  void group_reduce_scatter_sum(Group& group, const Value* in, Value* out, std::size_t n) {
    group.reduce_scatter_sum(in, out, n);
  }
  std::unique_ptr<PendingCollective> group_ring_shift(Group& group, const Value* send, Value* recv,
                                                      std::size_t n) {
    return group.start_ring_shift(send, recv, n);
  }
  // KV-cache decoding, one sequence: the query rows [t0, T_) of qkv (T_, C3), which holds the
  // cached rows before them, each attending causally over all rows up to itself → out
  // (T_ − t0, C), rounded.
  void attention_forward_rows(Value* out, const Value* qkv, int t0, int T_, int C, int NH, int KV);

  // The vocabulary-parallel ends (kernels/cpu/vocab_parallel.h). embedding_forward: out (N, C) =
  // this shard's rows of the tokens (zeros for ids outside it), to be summed over the group.
  // position_embedding_forward: x (rows, C) += wpe rows of positions row_begin.. (mod T_), x
  // rounded. The backwards add into the parameter gradients (not rounded).
  void embedding_forward(Value* out, const Ids* tokens, const Value* wte_shard, VocabShard vocab,
                         int N, int C);
  void embedding_backward(Grad* dwte_shard, const Value* dout, const Ids* tokens, VocabShard vocab,
                          int N, int C);
  void position_embedding_forward(Value* x, const Value* wpe, long row_begin, int rows, int T_,
                                  int C);
  void position_embedding_backward(Grad* dwpe, const Value* dx, long row_begin, int rows, int T_,
                                   int C);

  // Softmax cross-entropy of logits (N, vocab.rows), this rank's vocabulary shard, over the
  // group's shards (the collectives inside). forward: losses (N) per row, computed in T from the
  // rounded logits; the logits become the softmax probabilities (stats: kCrossEntropyStatsPerRow·N,
  // here none: null). backward: the logits (probabilities here) become d(loss_scale · mean
  // loss)/d(logits), rounded (with fp16, where a too large loss scale first overflows to inf);
  // losses stay. forward_backward: the losses of forward and the gradient of backward in one call
  // (here exactly the two; a backend may fuse them into one pass, as CUDA's one shard does).
  void cross_entropy_forward(Stat* losses, Stat* stats, Value* logits, const Ids* targets,
                             VocabShard vocab, int N);
  void cross_entropy_backward(Stat* losses, const Stat* stats, Value* logits, const Ids* targets,
                              Scalar loss_scale, VocabShard vocab, int N);
  void cross_entropy_forward_backward(Stat* losses, Stat* stats, Value* logits, const Ids* targets,
                                      Scalar loss_scale, VocabShard vocab, int N);

  // Mixture of experts (defined in model/moe/cpu_moe_ops.cpp; model/moe/moe_mlp.h calls them in
  // this order and says what each computes): MoeLayer<T>'s loops, each moved unchanged into an op
  // of its own. The router's probabilities, logsumexps and gates, the gates' and logits' gradients
  // are in T (Stat), rounded nowhere, as MoeLayer<T> kept them; the rows the experts read and
  // write are rounded where its kernels were.
  // Router: logits (T, a temporary, not rounded) = x·routerᵀ, then per token moe_softmax,
  // moe_top_k and moe_gates (model/kernels/moe_routing.h).
  void moe_router_forward(Stat* probs, Stat* lse, int* choices, Stat* gates, const Value* x,
                          const Value* router, int N, int C, int E, int k);
  // The choices are host memory already; prob_sums per expert and z summed term by term over the
  // tokens (z += lse_t²/N), in double.
  MoeRouterHost moe_router_to_host(const int* choices, const Stat* probs, const Stat* lse, int N,
                                   int E, int k);
  // share (E) = the f_e in T; assignments: the routing's own array (copied only if elsewhere).
  void moe_routing_to_device(int* assignments, Stat* share, const MoeRouting& routing,
                             const std::vector<double>& chosen_share);
  // row (N·k) = −1, then xe row r = x row assignments[r] / k and row[assignments[r]] = r.
  void moe_gather_rows(Value* xe, int* row, const Value* x, const int* assignments, int A, int N,
                       int k, int C);
  // moe_dispatch (from: the origin's A rows, to: R expert-major rows) or moe_combine (back).
  void moe_exchange_rows(RowExchange direction, const MoeExchange& plan, Collectives& ep,
                         const Value* from, Value* to, int C);
  // y (N, C) = Σ_j gate_tj · out_row(t,j) over the kept choices in choice order (in T), rounded.
  void moe_combine_rows(Value* y, const Value* out, const Stat* gates, const int* row, int N, int k,
                        int C);
  // Per kept row r: dgates[a] = dy_t · out_r (into dgates the caller zeroed), dout_r = gate·dy_t
  // (rounded); then dgates (N·k) summed over the tensor-parallel group.
  void moe_gate_grads(Stat* dgates, Value* dout, const Value* dy, const Value* out,
                      const Stat* gates, const int* assignments, int A, int N, int k, int C);
  // dlogits (N, E) per token by moe_router_backward (the gates', aux and z-loss terms).
  void moe_router_grads(Stat* dlogits, const Stat* probs, const Stat* lse, const int* choices,
                        const Stat* gates, const Stat* dgates, const Stat* share, Stat aux_scale,
                        Stat z_scale, int N, int E, int k);
  // dx (N, C) = dlogits·router (zeros when router is null: not tensor-parallel rank 0) + each
  // token's experts' input gradients dxe in choice order, rounded once.
  void moe_input_grads(Value* dx, const Stat* dlogits, const Value* router, const Value* dxe,
                       const int* row, int N, int k, int E, int C);
  // drouter (E, C) += dlogitsᵀ·x over N rows, in T.
  void moe_router_weight_grad(Grad* drouter, const Stat* dlogits, const Value* x, int N, int C,
                              int E);
  // The MoE's temporaries: host arrays (zeroed) that live as long as the returned object.
  class MoeScratch {
   public:
    template <class U>
    U* take(std::size_t n) {
      taken_.push_back(std::make_unique<std::byte[]>(std::max<std::size_t>(n, 1) * sizeof(U)));
      return reinterpret_cast<U*>(taken_.back().get());
    }

   private:
    std::vector<std::unique_ptr<std::byte[]>> taken_;
  };
  MoeScratch moe_scratch() { return MoeScratch(); }

 private:
  // `x` (rows, cols) cast to FP8 and back into `out` (grown as needed), as operand `operand` of
  // GEMM `fp8` whose sum runs along x's columns (`along_columns`) or its rows: one scale for the
  // tensor (tensorwise, delayed) or one per row of that sum (rowwise), each a power of two
  // (kernels/fp8.h fp8_scale) from amaxes taken over every rank holding part of that row, column
  // or tensor (fp8_recipe.h fp8_amax_groups). Returns out.
  const Value* fp8_cast(const Value* x, int rows, int cols, const Fp8Gemm& fp8, Fp8Operand operand,
                        bool along_columns, std::vector<T>& out);
  // The largest of `amaxes` over `groups`.
  void reduce_amaxes(std::span<float> amaxes, Fp8AmaxGroups groups);

  cpu::ComputeDtype compute_;
  std::unique_ptr<Collectives> alone_;  // the group of one, when none was given
  Collectives* tp_;
  bool sequence_parallel_;
  Collectives* cp_;  // null: one rank
  // The FP8 emulation's operand copies (inputs, weights, output gradients) and amaxes.
  std::vector<T> fp8_input_, fp8_weight_, fp8_grad_;
  std::vector<float> fp8_amax_;
  std::vector<T> attention_;  // attention's per-thread scratch, grown as needed and kept
  std::vector<T> gelu_grad_;  // matmul_backward_input's product before the GELU' (N, IC)
  std::vector<T> rows_;       // the cross-entropy's row pieces: (max(tp, 2), N)
  std::vector<T> row_max_;    // and its row maxima (N); the backward's d(loss)/d(loss_n) (N)
};

extern template class CpuOps<float>;
extern template class CpuOps<double>;

}  // namespace strata
