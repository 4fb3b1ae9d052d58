// GPT-2 (docs/ARCHITECTURE.md §5) on a CUDA device: the part of the model one rank holds
// (ModelPartition, as the CPU model model/gpt.h), forward and backward in the CPU model's op order
// so that fp32 runs agree with it to rounding. The passes launch no kernel themselves: every
// kernel of the embedding, the blocks, the head, the cross-entropy and the backward, and the
// tensor-parallel row collectives, is an op of one CudaOps<T> (model/ops/cuda_ops.h, over the
// kernels of model/kernels/cuda), the ops interface the CPU model's CpuOps shares (ops.h); the
// MoE blocks' experts run in CudaMoeLayer. The block's passes are the CPU model's own code,
// GptBlock (model/gpt_block_pass.h), over this model's storage.
// Per block, N = B·T rows:
//   ln1 = LN(x) → [gather rows] → qkv = ln1·Wqkvᵀ + b (this rank's heads) → atty = attention(qkv)
//   → atty·Wprojᵀ (partial) → [sum] → x2 = x + · + b and ln2 = LN(x2)   (one fused kernel)
//   → [gather rows] → h = gelu(ln2·Wfcᵀ + b)  (GELU in the GEMM epilogue) → h·Wprojᵀ (partial)
//   → [sum] → out = x2 + · + b
// In an MoE block (model.moe, every `every`-th) the MLP's line is the experts instead, through one
// CudaMoeLayer (model/moe/moe_layer_cuda.h, stateless like the CPU's MoeLayer):
//   → [gather rows] → moe(ln2) (router, capacity, experts, each the model's MLP; this rank's
//   H = F/tp columns of every expert, the proj biases on tp rank 0) → [sum] → out = x2 + ·
// first stage: x = [sum](wte_shard[tokens]) + wpe; last stage: lnf = LN(x_L) → [gather rows] →
// logits of this rank's vocabulary rows (N, Vp/tp) = lnf·wte_shardᵀ (head tied to wte) → softmax
// cross-entropy from shard pieces (row maxima, then sums, combined over the group).
// "[sum]" and "[gather rows]" are the tensor-parallel collectives of gpt.h (all-reduce, or with
// sequence parallelism reduce-scatter / all-gather of the B·T rows), staged through the host
// (model/kernels/cuda/staged_collectives.h) or over NCCL; with tp 1 they are nothing.
//
// Dtypes: T (float, __nv_bfloat16, __half) is the compute dtype of the weights copy the model
// reads, of every activation and every activation gradient; parameter gradients, LayerNorm
// statistics, attention logsumexps and losses are fp32 (ARCHITECTURE §6). The flat buffers (weights
// in T, gradients in fp32) follow ParameterLayout::for_partition, so offsets are the CPU model's.
// One rounding the CPU emulation does not have: in bf16/fp16 a tensor-parallel "[sum]" lands in a T
// array (staged: the fp32 sum rounded once; NCCL: summed in T), where the CPU model adds its fp32
// sum to the residual directly. Within the bf16/fp16 bounds; fp32 is unaffected.
//
// Parameters are reached segment by segment (model/parameter_access.h), as in the CPU model: the
// passes take a ParameterAccess<T, float> of device pointers and acquire a segment's weights
// around the kernels that read them (WeightUse::forward in the forward pass, WeightUse::backward
// in the backward pass and its recomputation) and its gradients around the kernels that add to
// them, in the CPU model's order (the tied wte's gradients held from the head's backward to the
// embedding's). The flat-pointer overloads wrap their buffers in FlatParameters. Kernels are
// asynchronous: what an acquire returns is read by kernels queued on the compute stream after it
// (a gather on another stream must make that stream wait), and a release comes once those kernels
// are queued, not run: an implementation that frees, reuses or reduces a segment's memory on
// release orders that after them (on the compute stream, or behind an event recorded there).
// FlatParameters does nothing on release.
//
// Memory: activations live in slots (one micro-batch each, from its forward to its backward, so a
// pipeline schedule can keep several in flight), all in one device reservation laid out at
// construction for `slots` micro-batches of max_batch sequences of seq_len (GptStorage,
// model/gpt_storage.h, the CPU model's storage too; no allocation during a step); kernels take
// their scratch from an arena. Attention keeps no (T, T) matrix, only the
// logsumexp of each query row. Recompute (activation checkpointing) as in the CPU model:
// `selective` keeps ln1 and recomputes qkv and the attention output (one GEMM and the attention
// forward) in the block's backward; `full` keeps only each block's input and reruns the block's
// forward (collectives included) into a one-layer workspace. Recomputation runs the forward's own
// code on the same inputs, so gradients are bitwise unchanged.
//
// Mixture of experts (docs/ARCHITECTURE.md §5 "Mixture of experts"), as the CPU model: each slot
// holds, per MoE block, the experts' activations of its micro-batch (a CudaMoeActivations carved
// from the same reservation, CudaMoeLayer's activation_bytes for max_batch·seq_len tokens), kept
// under every recompute mode (a full recompute reruns the block's experts into them, routing
// included, to the same values). The router losses' gradients enter each MoE block's backward,
// scaled like the cross-entropy's; losses() stays the cross-entropy alone and moe_loss() gives the
// router losses. Each MoE forward waits for the stream once (the capacity rule runs on the host).
// Expert parallelism (partition.ep_size > 1): the rank holds E/ep experts of each MoE block and
// exchanges the rows with its ep group through the host (model/moe/moe_layer_cuda.h), the
// experts' arrays sized for ep·max_batch·seq_len·k rows.
//
// Everything is queued on the context's compute stream. Tokens travel through a page-locked
// staging buffer: the host waits only until the previous micro-batch's tokens have left it (by
// then that micro-batch's kernels are all queued), for the host-staged tensor-parallel
// collectives (not over NCCL), and for the reads the caller asks for.
//
// The backward runs in parts (head, each block, embedding), each an input half (activation
// gradients; reads the weights) and a weight half (parameter gradients; reads no weights), as the
// CPU model's (docs/ARCHITECTURE.md §5, the split backward). The fused backward runs each part's
// halves back to back through a one-layer stash; with split_backward, backward_input runs every
// input half and leaves in the slot's weight stash (all layers, plus copies of what recomputation
// dropped) what backward_weight reads later. The same kernel calls add the same values either way.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "model/activation_slots.h"
#include "model/core/collectives.h"
#include "model/gpt.h"
#include "model/gpt_block_pass.h"
#include "model/gpt_passes.h"
#include "model/gpt_shape.h"
#include "model/kernels/cuda/arena.h"
#include "model/kernels/cuda/device_buffer.h"
#include "model/kernels/cuda/device_collectives.h"
#include "model/kernels/cuda/device_context.h"
#include "model/kernels/cuda/staged_collectives.h"
#include "model/moe/moe_layer_cuda.h"
#include "model/ops/cuda_ops.h"
#include "model/parameter_access.h"
#include "model/parameter_layout.h"

namespace strata::cuda {

// A CUDA model's context-parallel group (partition.context; `cp` null when its size is 1): host
// collectives the model stages the K/V blocks through, unless `device_cp` carries them device to
// device (NCCL); `comm`, how they travel. The model then computes this rank's seq_len / cp rows of
// each sequence (model/gpt.h says how).
struct CudaContextGroup {
  Collectives* cp = nullptr;
  DeviceCollectives* device_cp = nullptr;
  ContextComm comm = ContextComm::ring;
};

template <class T>
class CudaGpt : public GptPasses<CudaGpt<T>, CudaOps<T>, CudaMoeLayer<T>> {
  using Passes = GptPasses<CudaGpt<T>, CudaOps<T>, CudaMoeLayer<T>>;
  friend Passes;

 public:
  // The whole model, one activation slot. Throws when the head size has no attention kernel
  // (attention_head_size_supported).
  CudaGpt(DeviceContext& ctx, const GptShape& shape, int max_batch, Recompute recompute);
  // `partition` of the model; `tp` is its tensor-parallel group (host collectives, not owned; may
  // be null when partition.tp_size is 1), over which the model stages its collectives, unless
  // `device_tp` (not owned) carries them device to device (NCCL). `slots`: micro-batches held at
  // once. `split_backward`: each slot keeps a weight stash, so that backward_input and
  // backward_weight may run (zero-bubble pipeline schedules); without it only the fused backward.
  // `ep`: the expert-parallel group (host collectives, size partition.ep_size, not owned; may be
  // null when it is 1). `context`: the context-parallel group (CudaContextGroup). `fp8`: which
  // GEMMs multiply in FP8 and how (precision.fp8: tensorwise or delayed on CUDA; bf16 models).
  CudaGpt(DeviceContext& ctx, const GptShape& shape, const ModelPartition& partition,
          Collectives* tp, int max_batch, int slots, Recompute recompute,
          DeviceCollectives* device_tp = nullptr, bool split_backward = false,
          Collectives* ep = nullptr, const CudaContextGroup& context = {},
          const Fp8Settings& fp8 = {});
  ~CudaGpt();
  // The delayed FP8 recipe's step with the amaxes the device keeps (model/fp8/fp8_state.h):
  // begin_fp8_step forgets what was kept since the last step; hand_over_fp8_step gives the step's
  // to the state (fp8_state()), before its end_step. Nothing without the delayed recipe.
  void begin_fp8_step();
  void hand_over_fp8_step();
  CudaGpt(const CudaGpt&) = delete;
  CudaGpt& operator=(const CudaGpt&) = delete;

  // shape(), partition(), layout(), segments(), activation_rows(B, T_), slots(), moe_loss(slot),
  // activation_bytes(), activation_bytes_per_layer() and take_moe_totals come from GptPasses
  // (model/gpt_passes.h), as for the CPU model: the router losses from the host's copy of the
  // router totals (no wait), the device bytes of the activations kept in the slots used so far
  // (the layers, the MoE blocks' experts, the head's logits and losses, the weight stash) and the
  // recompute workspace.
  Recompute recompute() const { return this->recompute_; }
  bool split_backward() const { return storage_.options().split_backward; }
  DeviceContext& context() const { return ctx_; }
  int max_batch() const { return max_batch_; }

  // Training, one micro-batch through a partition that is a whole pipeline (first and last
  // stage), slot 0: forward, loss and backward in one pass (the cross-entropy gradient is fused
  // into its forward). weights (layout().total(), T, device); grads (fp32, device) +=
  // d(loss_scale · mean loss)/d(params). tokens, targets (B, T_) on the host, ids < vocab_size
  // (checked). The B·T_ per-position losses stay on the device: losses().
  void forward_backward(const T* weights, float* grads, const std::int32_t* tokens,
                        const std::int32_t* targets, int B, int T_, float loss_scale) {
    FlatParameters<T, float> flat(this->segments(), weights, grads);
    forward_backward(flat, tokens, targets, B, T_, loss_scale);
  }
  // The same, reaching the weights and gradients segment by segment through `parameters`.
  void forward_backward(ParameterAccess<T, float>& parameters, const std::int32_t* tokens,
                        const std::int32_t* targets, int B, int T_, float loss_scale);

  // Evaluation through a whole pipeline, slot 0: forward only, per-position losses into
  // losses(). targets may be null: logits only (logits() then holds (B·T_, Vp / tp) in T).
  void forward(const T* weights, const std::int32_t* tokens, const std::int32_t* targets, int B,
               int T_) {
    forward(0, weights, tokens, targets, B, T_);
  }

  // One pipeline stage. forward: micro-batch (B, T_) into `slot`; the first stage reads `tokens`
  // (host), later stages the input the caller wrote to stage_input(slot) beforehand; the last
  // stage reads `targets` (null: logits only) and keeps the per-position losses, the logits and
  // their row statistics for the backward. backward: grads += this stage's parameter gradients of
  // loss_scale · mean loss; a stage before the last starts from the gradient of its output,
  // written to stage_output_grad() beforehand; afterwards, on a stage after the first,
  // stage_input_grad() holds the gradient to send to the previous stage (until the next backward).
  void forward(int slot, const T* weights, const std::int32_t* tokens, const std::int32_t* targets,
               int B, int T_) {
    FlatParameters<T, float> flat(this->segments(), weights, nullptr);
    forward(slot, flat, tokens, targets, B, T_);
  }
  void backward(int slot, const T* weights, float* grads, float loss_scale) {
    FlatParameters<T, float> flat(this->segments(), weights, grads);
    backward(slot, flat, loss_scale);
  }
  // The same, reaching the weights (and gradients) segment by segment through `parameters`.
  void forward(int slot, ParameterAccess<T, float>& parameters, const std::int32_t* tokens,
               const std::int32_t* targets, int B, int T_);
  // backward(slot, parameters, loss_scale) and its halves backward_input (stage_input_grad()
  // among the activation gradients it computes) and backward_weight come from GptPasses.
  using Passes::backward;
  // (activation_rows, C) device arrays in T.
  T* stage_input(int slot);
  const T* stage_output(int slot) const;
  T* stage_output_grad();
  const T* stage_input_grad() const;

  // Device pointers valid until the slot's next pass: per-position losses (B·T_, fp32) if its last
  // forward had targets; logits (B·T_, Vp / tp) if it was a forward without targets; null
  // otherwise (and on stages without the head).
  const float* losses(int slot = 0) const;
  const T* logits(int slot = 0) const;
  // Σ losses of the slot's last pass (copies B·T_ floats to the host and waits for the stream).
  double loss_sum(int slot = 0) const;
  // Device bytes this model reserved: activations, backward buffers, kernel scratch and the
  // staging of the tensor-parallel collectives, the context-parallel attention's working memory.
  std::size_t device_bytes() const;

 private:
  using Passes::partition_;
  using Passes::sequence_parallel_;
  using Passes::shape_;
  using Passes::storage_;
  using typename Passes::Slot;
  using Parameters = ParameterAccess<T, float>;
  void upload_tokens(Slot& s, const std::int32_t* tokens, const std::int32_t* targets, long N);

  DeviceContext& ctx_;
  int max_batch_;
  ContextComm context_comm_;  // how the K/V blocks travel under context parallelism
  DeviceArena scratch_;
  std::unique_ptr<StagedCollectives> staged_tp_;  // the staging, when no device_tp was given
  DeviceCollectives* tp_ = nullptr;               // null with tp 1
  std::unique_ptr<StagedCollectives> staged_cp_;  // cp > 1 without a device_cp, else null
  CudaOps<T> ops_;                                // every kernel of the passes
  std::unique_ptr<CudaMoeLayer<T>> moe_;  // the MoE blocks' computation (model.moe), else null
  PinnedBuffer<std::int32_t> staging_;    // (2, max_batch·T rows): tokens, targets
  cudaEvent_t staging_free_ = nullptr;    // recorded after the copies out of staging_
};

extern template class CudaGpt<float>;
extern template class CudaGpt<__nv_bfloat16>;
extern template class CudaGpt<__half>;

}  // namespace strata::cuda
