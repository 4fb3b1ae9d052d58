// The planner's compute model: the work of one micro-batch's forward and backward pass on one
// rank, as GEMM FLOPs, attention FLOPs, elementwise bytes, GEMM weight bytes and kernel count, and
// its time on a device's sustained rates (plan/cluster.h: sustained):
//   time = GEMM FLOPs / matmul rate + attention FLOPs / attention rate
//          + elementwise bytes / elementwise bandwidth
//          + GEMM weight bytes / weight_operand_gbs + kernels · per-kernel overhead.
// The weight term is a GEMM call's cost that does not shrink with its rows: every call reads
// (GPU) or packs (OpenBLAS) its whole weight operand, so a pass of one short sequence pays it in
// full; per pass a layer's GEMMs touch its 12·C²/t weights once forward and twice backward (the
// input's and the weight's gradients), the head its C·V/t likewise.
// The work follows Gpt (model/gpt.cpp, gpt_block.cpp) on a rank's partition: per layer, with N =
// B·T rows, C the width, t the tensor-parallel size and N' the residual stream's rows (N/t under
// sequence parallelism, else N):
//   GEMMs      2·N·C·(3C + C + 4C + 4C)/t = 24·N·C²/t     (qkv, attention projection, MLP)
//   attention  4·N·T·C/t                                  (Q·Kᵀ and probabilities·V, unmasked)
//   elementwise 4·N'·C + N·4C/t elements                  (2 LayerNorms, 2 residuals, GELU)
// the embedding N·C elements, the head 2·N·C·V/t GEMM FLOPs and 3·N·V/t + N'·C elements (the
// cross-entropy's passes, the final LayerNorm). Each elementwise element is read and written
// once. An MoE block (model.moe, model/moe/moe_layer.h) keeps the attention half (8·N·C²/t) and
// replaces the MLP by the router, 2·N·C·E on every rank, and the experts held (each the model's
// MLP: F hidden columns, Fc = F or SwiGLU's 2F rows of its first product) on the rows routed to
// them, 2·R·C·(Fc + F)/t (16·R·C²/t for GPT-2's) with R = min(N·k, capacity-limited) under
// balanced routing (model/activation_sizes.h moe_balanced_assignments; whatever ep, each rank's
// experts compute as many rows as its tokens sent); its weight operands are the router's E·C fp32
// and the E/ep held experts' C·(Fc + F)/t each. Dropless this is the 6·N_active FLOPs per token of
// GptShape::flops_per_token (router and top_k experts), which MFU counts. A backward pass is twice
// its forward, plus what recomputation reruns (selective: the qkv GEMM and attention; full: the
// whole layer forward). The optimizer (over the owned elements: plan/optimizer_state.h) and the
// gradient zeroing are elementwise work of a step.
#pragma once

#include "model/parameter_layout.h"
#include "plan/cluster.h"
#include "plan/config.h"

namespace strata {

struct Work {
  double gemm_flops = 0;
  double attention_flops = 0;
  double elementwise_bytes = 0;
  double kernels = 0;
  double weight_bytes = 0;  // weight operands of the GEMM calls

  Work& operator+=(const Work& other);
  Work operator*(double factor) const;
};

struct PassWork {
  Work forward;
  Work backward;  // recomputation included
  // Of `backward`, what its weight half does when the backward is split (the zero-bubble
  // schedules' W, docs/ARCHITECTURE.md §5): the weight-gradient GEMMs and the embedding's
  // scatter; the rest is the input half B.
  Work weight;
};

// One micro-batch on the rank holding `partition`, whose activations are `element_bytes` each.
PassWork micro_batch_work(const Config& config, const ModelPartition& partition,
                          std::size_t element_bytes);
// The same for layers [begin, end) alone (no embedding, no head): the stage split's layer cost.
PassWork layer_work(const Config& config, int tp, int begin, int end, std::size_t element_bytes);
// The end of a step on a rank that updates `owned` elements and holds `gradients` of them.

// Seconds of `work` on one device of `cluster` computing in precision.compute `compute` with
// `threads` cores (a cpu cluster's rates are per core; a cuda device has one).
double seconds_of(const Work& work, const ClusterSpec& cluster, cpu::ComputeDtype compute,
                  int threads = 1);

// The size of an activation element on the cluster's backend: the CPU backend computes in fp32
// storage whatever the precision; the CUDA backend keeps bf16/fp16 activations in 2 bytes.
std::size_t activation_element_bytes(const ClusterSpec& cluster, cpu::ComputeDtype compute);

}  // namespace strata
