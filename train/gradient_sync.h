// The gradient reductions that close a training step under 3D parallelism, and the global norm.
// After synchronize_gradients every rank holds, for each of its tensors, the gradient of the whole
// global batch, bitwise equal on every rank that holds the same elements, so replicas never drift.
#pragma once

#include <cstddef>
#include <utility>
#include <vector>

#include "model/gpt.h"
#include "parallel/process_groups.h"

namespace strata {

// 1. Sequence parallelism: tensors replicated over the tensor-parallel group (LayerNorms,
//    row-parallel biases, wpe) saw only this rank's rows: their partial gradients are summed over
//    the group. (Without it every rank computed the full gradient already.)
// 2. Data parallelism: every gradient is summed over the data-parallel group.
// 3. Pipeline parallelism: the tied wte lives on the first and the last stage; their gradients
//    (embedding and head), already summed over data parallelism, are exchanged and summed.
//    In this order the two stages' copies stay bitwise equal whatever order an all-reduce sums
//    in: the first and the last stage reduce over different groups, with wte at different
//    offsets of different-sized buffers, so a ring all-reduce over 3 or more ranks may round
//    their dp sums differently, but after it each end adds the same two values.
void synchronize_gradients(const Gpt<float>& model, float* grads, const ProcessGroups& groups);

// Whether synchronize_gradients has anything to sum across ranks under these groups.
bool gradients_need_synchronizing(const Gpt<float>& model, const ProcessGroups& groups);

// The three reductions above as data, so a device backend runs exactly these on its own copy of
// the gradients (train/cuda_training.h, over NCCL). Offsets and counts are elements of the layout.
struct GradientSyncPlan {
  // 1. Ranges (offset, count) summed over the tensor-parallel group.
  std::vector<std::pair<std::size_t, std::size_t>> tp_sums;
  // 2. The first dp_count elements (all of them) summed over the data-parallel group.
  std::size_t dp_count = 0;
  // 3. The tied wte: exchanged with pipeline-group rank tied_peer and summed (-1: nothing).
  int tied_peer = -1;
  std::size_t tied_offset = 0, tied_count = 0;
};
GradientSyncPlan gradient_sync_plan(const Gpt<float>& model, const ProcessGroups& groups);
void synchronize_gradients(const GradientSyncPlan& plan, float* grads, const ProcessGroups& groups);

// ‖g‖₂ over the logical model, each logical element counted once (replicas and the last stage's
// copy of wte excluded), summed over the tensor- and pipeline-parallel groups in double; the same
// value on every rank.
double global_gradient_norm(const Gpt<float>& model, const float* grads,
                            const ProcessGroups& groups);
// Its two halves, for gradients that live elsewhere (the CUDA backend): the (offset, size) ranges
// of this rank's gradients that count, and the norm from this rank's Σ g² over them.
std::vector<std::pair<std::size_t, std::size_t>> gradient_norm_ranges(const Gpt<float>& model);
double global_norm_from_sum(double local_sum_of_squares, const ProcessGroups& groups);

// Whether this rank writes tensor `t` of its layout into checkpoints: one copy of every logical
// element, from data-parallel rank 0, tensor-parallel rank 0 for replicated tensors, and the first
// stage for wte.
bool writes_to_checkpoint(const Gpt<float>& model, const TensorView& t, const Mesh& mesh);

}  // namespace strata
