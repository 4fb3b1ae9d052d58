// CudaOps<T>: the CUDA device's ops for the GPT's passes (T = float, __nv_bfloat16, __half), over
// the kernels of model/kernels/cuda; the op list and its types are model/ops/ops.h's, the meaning
// of each op that of CpuOps (model/ops/cpu_ops.h).
//
// Each op is the launcher sequence CudaGpt queued inline for that step before the ops existed
// (same kernels, same arguments, same order), so the model's results are bitwise unchanged. The
// kernels round their own outputs to T in their epilogues: round_to_compute does nothing.
// Everything is queued on the context's compute stream; no op waits for the device, but for the
// host-staged tensor-parallel collectives (model/kernels/cuda/staged_collectives.h).
//
// Types: activations, activation gradients and weights in T; parameter gradients, LayerNorm
// statistics, attention logsumexps (kLsePerRow: one per (row, head)), losses and the
// cross-entropy's row statistics (kCrossEntropyStatsPerRow: row max, Σ exp, target logit) in fp32.
//
// What it reaches, none of it owned: the device context (stream, cuBLASLt), the kernels' scratch
// arena (the weight halves' column sums, the embedding's sort, attention's row sums, the
// cross-entropy's loss gradient; each op releases what it takes before returning), and the
// tensor-parallel group (null for one rank), over which the row collectives and the sharded
// cross-entropy run, whatever carries them (staged through the host or NCCL).
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "model/kernels/cuda/arena.h"
#include "model/kernels/cuda/check.h"
#include "model/kernels/cuda/device_buffer.h"
#include "model/kernels/cuda/device_collectives.h"
#include "model/kernels/cuda/device_context.h"
#include "model/kernels/cuda/fp8_cast.h"
#include "model/kernels/cuda/matmul.h"
#include "model/ops/ops.h"

namespace strata::cuda {

template <class T>
class CudaOps {
 public:
  using Value = T;       // activations, activation gradients, weights
  using Grad = float;    // parameter gradients
  using Stat = float;    // LayerNorm statistics, logsumexps, losses, cross-entropy row statistics
  using Scalar = float;  // the loss scale
  using Ids = std::int32_t;
  using Reservation = DeviceBuffer<char>;  // where a model lays out its activations
  // Attention keeps the logsumexp of each (row, head) for its backward.
  static constexpr long kLsePerRow = 1;
  // The cross-entropy keeps per row its maximum, Σ exp and target logit (crossentropy.h).
  static constexpr long kCrossEntropyStatsPerRow = 3;
  // The group context parallelism's attention moves its K/V blocks over (device collectives,
  // staged through the host or NCCL; the group_* calls below).
  using Group = DeviceCollectives;

  // `tp`: the tensor-parallel group; null for one rank (then there are no collectives).
  // `sequence_parallel`: the rows of the residual stream are split over the group.
  CudaOps(DeviceContext& ctx, DeviceArena& scratch, DeviceCollectives* tp, bool sequence_parallel)
      : ctx_(ctx),
        scratch_(scratch),
        tp_(tp),
        sequence_parallel_(tp != nullptr && sequence_parallel) {}
  // FP8 GEMMs (precision.fp8; model/ops/cuda_ops_fp8.cu): `cp`, the context-parallel group a
  // micro-batch's amaxes are reduced over (null: one rank); `sites`, the delayed recipe's operands
  // (Fp8State::sites), whose step amaxes the device keeps in fp8_step_amaxes() until the model
  // hands them to its state (0: none kept); `fused_codes`, the bytes of the largest tensor a norm
  // or GELU casts as it writes it (fused_cast; 0: every cast apart).
  void use_fp8(DeviceCollectives* cp, std::size_t sites, std::size_t fused_codes = 0);
  float* fp8_step_amaxes() const { return fp8_step_.get(); }
  // Device bytes use_fp8 holds: the step amaxes and the fused casts' codes.
  std::size_t fp8_bytes() const {
    return fp8_step_.size() * sizeof(float) + fp8_fused_codes_.size() +
           fp8_fused_scales_.size() * sizeof(float);
  }
  int tp_rank() const { return tp_ != nullptr ? tp_->rank() : 0; }
  int tp_size() const { return tp_ != nullptr ? tp_->size() : 1; }

  // The tensor-parallel row collectives on (N, C) rows (CpuOps's): sum_rows returns `partial`
  // (all-reduced in place) or, with sequence parallelism, `local_out` (reduce-scattered);
  // gather_rows returns `local` or, with sequence parallelism, `full` (all-gathered);
  // gather_rows_into always leaves all rows in `full`.
  const Value* sum_rows(Value* partial, Value* local_out, int N, int C);
  const Value* gather_rows(const Value* local, Value* full, int N, int C);
  void gather_rows_into(const Value* local, Value* full, int N, int C);
  // Device to device, n elements, queued on the stream.
  template <class U>
  void copy(U* to, const U* from, std::size_t n) {
    STRATA_CUDA_CHECK(
        cudaMemcpyAsync(to, from, n * sizeof(U), cudaMemcpyDeviceToDevice, ctx_.stream()));
  }
  template <class U>
  void zero(U* data, std::size_t n) {
    STRATA_CUDA_CHECK(cudaMemsetAsync(data, 0, n * sizeof(U), ctx_.stream()));
  }
  // Nothing: every kernel stores its outputs in T already.
  void round_to_compute(Value*, long) const {}

  // Linear layers through cuBLASLt (kernels/cuda/matmul.h). `bias`: pre_gelu unused. `gelu` and
  // `bias_gelu` (one function here): the GELU epilogue, pre_gelu (N, OC) kept. With `fp8`, the
  // casts and cuBLASLt's FP8 GEMM (cuda_ops_fp8.cu: bf16 operands; per-tensor scales), the GELU
  // and GELU' as kernels of their own and the bias gradient from the unquantised dout.
  void matmul_forward(Value* out, Value* pre_gelu, const Value* inp, const Value* weight,
                      const Value* bias, int N, int IC, int OC, Epilogue epilogue,
                      const Fp8Gemm& fp8);
  // pre_gelu non-null: GELU' in the epilogue (DGELU).
  void matmul_backward_input(Value* dinp, const Value* dout, const Value* weight,
                             const Value* pre_gelu, int N, int IC, int OC, const Fp8Gemm& fp8);
  // dbias from the same pass over dout (BGRADB).
  void matmul_backward_weight(Grad* dweight, Grad* dbias, const Value* dout, const Value* inp,
                              int N, int IC, int OC, const Fp8Gemm& fp8);
  // All N rows (bias_rows.count == N): exactly matmul_backward_weight. Fewer (sequence
  // parallelism): bias_backward's column sums over the range, then the GEMM without bias.
  void matmul_backward_weight_rows(Grad* dweight, Grad* dbias, const Value* dout, const Value* inp,
                                   int N, int IC, int OC, RowRange bias_rows, const Fp8Gemm& fp8);

  void gelu_forward(Value* out, const Value* inp, long n);
  void gelu_backward(Value* dinp, const Value* inp, const Value* dout, long n);
  // The Llama block's ops (kernels/cuda/rmsnorm.h, swiglu.h, rope.h), as CpuOps's. The norms
  // cast `out` for `cast_for` in the same pass where fused_cast allows.
  void rmsnorm_forward(Value* out, Stat* rstd, const Value* inp, const Value* weight, int N, int C,
                       double eps, const Fp8Gemm& cast_for);
  void residual_rmsnorm_forward(Value* sum_out, Value* out, Stat* rstd, const Value* residual,
                                const Value* y, const Value* y_bias, const Value* weight, int N,
                                int C, double eps, const Fp8Gemm& cast_for);
  void rmsnorm_backward_input(Value* dinp, const Value* dout, const Value* inp, const Value* weight,
                              const Stat* rstd, int N, int C);
  void rmsnorm_backward_weight(Grad* dweight, const Value* dout, const Value* inp, const Stat* rstd,
                               int N, int C);
  void swiglu_forward(Value* out, const Value* h, int N, int F);
  void swiglu_backward(Value* dh, const Value* dout, const Value* h, int N, int F);
  void rope_forward(Value* qkv, const RopeLayout& layout);
  void rope_backward(Value* dqkv, const RopeLayout& layout);

  // eps the model's (model.norm_eps); bias, y_bias and (below) dbias may be null (no bias).
  void layernorm_forward(Value* out, Stat* mean, Stat* rstd, const Value* inp, const Value* weight,
                         const Value* bias, int N, int C, double eps, const Fp8Gemm& cast_for);
  void residual_layernorm_forward(Value* sum_out, Value* out, Stat* mean, Stat* rstd,
                                  const Value* residual, const Value* y, const Value* y_bias,
                                  const Value* weight, const Value* bias, int N, int C, double eps,
                                  const Fp8Gemm& cast_for);
  void layernorm_backward_input(Value* dinp, const Value* dout, const Value* inp,
                                const Value* weight, const Stat* mean, const Stat* rstd, int N,
                                int C);
  void layernorm_backward_weight(Grad* dweight, Grad* dbias, const Value* dout, const Value* inp,
                                 const Stat* mean, const Stat* rstd, int N, int C);

  void residual_bias_forward(Value* out, const Value* x, const Value* y, const Value* bias, int N,
                             int C);

  // lse: (B, NH, T_) logsumexps, written by the forward and read by the backward (which reads out
  // too; kernels/cuda/attention.h).
  void attention_forward(Value* out, Stat* lse, const Value* qkv, int B, int T_, int C, int NH,
                         int KV);
  void attention_backward(Value* dqkv, const Value* dout, const Value* qkv, const Value* out,
                          const Stat* lse, int B, int T_, int C, int NH, int KV);
  // Context parallelism's steps (CpuOps's, model/kernels/cuda/attention.h and attention_merge.h):
  // a pair's partial attention, the merge, the row terms, a pair's gradients added; copy_columns
  // as one 2-D copy; the K/V blocks' collectives over the group, queued on the stream.
  void attention_pair_forward(Value* out, Stat* lse, const Value* q, const Value* k, const Value* v,
                              const AttentionPair& pair);
  void attention_merge(Value* out, Stat* lse, const Value* part, const Stat* part_lse,
                       const AttentionPair& pair);
  void attention_delta(Stat* delta, const Value* dout, const Value* out, const AttentionPair& pair);
  void attention_pair_backward(Value* dq, Value* dk, Value* dv, const Value* dout, const Stat* lse,
                               const Stat* delta, const Value* q, const Value* k, const Value* v,
                               const AttentionPair& pair);
  void copy_columns(Value* dst, long dst_row, const Value* src, long src_row, long rows, int cols);
  void group_all_gather(Group& group, const Value* in, Value* out, std::size_t n) {
    group.all_gather(in, out, n, ctx_.stream());
  }
  void group_reduce_scatter_sum(Group& group, const Value* in, Value* out, std::size_t n) {
    group.reduce_scatter_sum(in, out, n, ctx_.stream());
  }
  std::unique_ptr<PendingCollective> group_ring_shift(Group& group, const Value* send, Value* recv,
                                                      std::size_t n) {
    return group.start_ring_shift(send, recv, n, ctx_.stream());
  }
  // KV-cache decoding (CpuOps's): there is no CUDA kernel for it; generation decodes on the CPU
  // (model/gpt_decoder.h), so this says so in an error.
  void attention_forward_rows(Value* out, const Value* qkv, int t0, int T_, int C, int NH, int KV);

  void embedding_forward(Value* out, const Ids* tokens, const Value* wte_shard, VocabShard vocab,
                         int N, int C);
  void embedding_backward(Grad* dwte_shard, const Value* dout, const Ids* tokens, VocabShard vocab,
                          int N, int C);
  void position_embedding_forward(Value* x, const Value* wpe, long row_begin, int rows, int T_,
                                  int C);
  void position_embedding_backward(Grad* dwpe, const Value* dx, long row_begin, int rows, int T_,
                                   int C);

  // Softmax cross-entropy over the group's vocabulary shards. forward: losses and the row
  // statistics (stats: 3N), the logits kept. backward: the logits become their gradient from the
  // logits and stats, the losses rewritten with the same values. forward_backward: losses and the
  // gradient in one pass (one shard: one launch), stats used as the shards' workspace.
  void cross_entropy_forward(Stat* losses, Stat* stats, Value* logits, const Ids* targets,
                             VocabShard vocab, int N);
  void cross_entropy_backward(Stat* losses, const Stat* stats, Value* logits, const Ids* targets,
                              Scalar loss_scale, VocabShard vocab, int N);
  void cross_entropy_forward_backward(Stat* losses, Stat* stats, Value* logits, const Ids* targets,
                                      Scalar loss_scale, VocabShard vocab, int N);

  // Mixture of experts (defined in model/moe/cuda_moe_ops.cu; the meaning of each is CpuOps's,
  // model/ops/cpu_ops.h): the launcher sequences CudaMoeLayer queued inline before, over
  // kernels/cuda/moe.h and the cuBLASLt GEMMs. The router's probabilities, logsumexps, gates and
  // their gradients are fp32 (Stat); the logits an fp32 scratch array.
  void moe_router_forward(Stat* probs, Stat* lse, int* choices, Stat* gates, const Value* x,
                          const Value* router, int N, int C, int E, int k);
  // The layer's one stream wait: the per-expert Σ p and Σ lse² (moe_router_sums, fp64) and the
  // choices copied to the host; z = (Σ lse²) / N (the CPU adds lse²/N term by term).
  MoeRouterHost moe_router_to_host(const int* choices, const Stat* probs, const Stat* lse, int N,
                                   int E, int k);
  // The kept assignments (A) and f_e (rounded to fp32 as the CPU's T) to the device (pageable
  // copies: staged before the call returns).
  void moe_routing_to_device(int* assignments, Stat* share, const MoeRouting& routing,
                             const std::vector<double>& chosen_share);
  // row (N·k) set to −1 (all bits), then moe_gather_rows.
  void moe_gather_rows(Value* xe, int* row, const Value* x, const int* assignments, int A, int N,
                       int k, int C);
  // Staged through the host as raw bytes (C·sizeof(T) a row): device → host, one stream wait,
  // moe_dispatch / moe_combine<std::uint8_t>, host → device.
  void moe_exchange_rows(RowExchange direction, const MoeExchange& plan, Collectives& ep,
                         const Value* from, Value* to, int C);
  // The gated sum in fp32, rounded once.
  void moe_combine_rows(Value* y, const Value* out, const Stat* gates, const int* row, int N, int k,
                        int C);
  // dgates (fp32) and dout; dgates then all-reduced over the tensor-parallel group's devices.
  void moe_gate_grads(Stat* dgates, Value* dout, const Value* dy, const Value* out,
                      const Stat* gates, const int* assignments, int A, int N, int k, int C);
  void moe_router_grads(Stat* dlogits, const Stat* probs, const Stat* lse, const int* choices,
                        const Stat* gates, const Stat* dgates, const Stat* share, Stat aux_scale,
                        Stat z_scale, int N, int E, int k);
  // One fused kernel: the router's part (router non-null) and the experts' rows, rounded once.
  void moe_input_grads(Value* dx, const Stat* dlogits, const Value* router, const Value* dxe,
                       const int* row, int N, int k, int E, int C);
  // In exact fp32 (x cast to fp32, TF32 off whatever the context allows), as the CPU's T.
  void moe_router_weight_grad(Grad* drouter, const Stat* dlogits, const Value* x, int N, int C,
                              int E);
  // The MoE's temporaries: taken from the scratch arena, released when the object goes.
  class MoeScratch {
   public:
    explicit MoeScratch(DeviceArena& arena) : arena_(arena), scope_(arena) {}
    template <class U>
    U* take(std::size_t n) {
      return arena_.allocate<U>(n);
    }

   private:
    DeviceArena& arena_;
    ArenaScope scope_;
  };
  MoeScratch moe_scratch() { return MoeScratch(scratch_); }

 private:
  // Several shards: the global row maxima into stats[0, N), then the global Σ exp and target
  // logits into stats[N, 3N).
  void cross_entropy_shard_statistics(Stat* stats, const Value* logits, const Ids* targets,
                                      VocabShard vocab, int N);
  // d(loss_scale · mean loss)/d(loss_n) = loss_scale / N for every row, in N floats of scratch (the
  // caller releases them).
  float* loss_gradient(Scalar loss_scale, int N);

  // The FP8 GEMMs of the matmul ops (cuda_ops_fp8.cu). fp8_cast: the operand's codes
  // (transposed: (cols, rows)), scaled per tensor or per row of the codes (rowwise), their amaxes
  // over the ranks fp8_amax_groups names (CpuOps's rule), and its dequantisation factors, in the
  // scratch arena (the caller's scope).
  struct Fp8Codes {
    std::uint8_t* codes;
    const float* inverse;  // one factor, or one per row of the codes (scales rows)
    Fp8Format format;
    Fp8Scales scales;
  };
  Fp8Codes fp8_cast(const Value* x, int rows, int cols, const Fp8Gemm& fp8, Fp8Operand operand,
                    bool transpose);
  void fp8_forward(Value* out, Value* pre_gelu, const Value* inp, const Value* weight,
                   const Value* bias, int N, int IC, int OC, const Fp8Gemm& fp8);
  void fp8_backward_input(Value* dinp, const Value* dout, const Value* weight,
                          const Value* pre_gelu, int N, int IC, int OC, const Fp8Gemm& fp8);
  void fp8_backward_weight(Grad* dweight, const Value* dout, const Value* inp, int N, int IC,
                           int OC, const Fp8Gemm& fp8);

  DeviceContext& ctx_;
  DeviceArena& scratch_;
  DeviceCollectives* tp_;
  bool sequence_parallel_;
  // The cast of `out` (n values, about to be written) as the input of GEMM `next`, for the kernel
  // that writes it, where the scale is known before the values: `next` multiplies in FP8 under
  // the delayed recipe and its input has a history. Else empty (the GEMM casts apart). fp8_cast
  // then hands these codes to `next`'s forward, the next cast of all; any other cast drops them.
  Fp8CastOutput fused_cast(const Value* out, long n, const Fp8Gemm& next);
  struct Fp8FusedCodes {
    const Value* source = nullptr;  // the tensor they are the codes of; null: none held
    int layer = 0;
    Fp8Layer gemm = Fp8Layer::qkv;
    long elements = 0;
    Fp8Format format = Fp8Format::e4m3;
  };
  DeviceCollectives* fp8_cp_ = nullptr;
  DeviceBuffer<float> fp8_step_;  // the delayed recipe's step amaxes, per Fp8State site
  DeviceBuffer<std::uint8_t> fp8_fused_codes_;
  DeviceBuffer<float> fp8_fused_scales_;  // the codes' scale and its inverse
  Fp8FusedCodes fp8_fused_;
  // The MoE ops' host staging: the router's choices and sums, f_e in fp32, the exchanged rows.
  std::vector<int> moe_host_choices_;
  std::vector<double> moe_host_sums_;
  std::vector<float> moe_host_share_;
  std::vector<std::uint8_t> moe_host_sent_, moe_host_received_;
};

extern template class CudaOps<float>;
extern template class CudaOps<__nv_bfloat16>;
extern template class CudaOps<__half>;

}  // namespace strata::cuda
