#include "train/gradient_sync.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "model/kernels/cpu/adamw.h"

namespace strata {

namespace {
// Replicated over the tensor-parallel group (every rank holds all of it).
bool replicated_over_tp(const Gpt<float>& model, const TensorView& t) {
  return model.partition().tp_size > 1 && t.slice.is_whole();
}

// The last stage's wte is a copy of the first stage's (tied head) when the two differ.
bool is_tied_copy(const Gpt<float>& model, const TensorView& t) {
  return t.name == "wte" && !model.partition().has_embedding;
}
}  // namespace

GradientSyncPlan gradient_sync_plan(const Gpt<float>& model, const ProcessGroups& groups) {
  const ModelPartition& p = model.partition();
  const ParameterLayout& layout = model.layout();
  GradientSyncPlan plan;
  if (p.sequence_parallel && p.tp_size > 1)
    for (const TensorView& t : layout.tensors())
      if (replicated_over_tp(model, t)) plan.tp_sums.emplace_back(t.offset, t.size);
  const Communicator& pp = groups.pp();
  if (pp.size() > 1 && (p.has_embedding || p.has_head)) {
    const TensorView& wte = layout.at("wte");
    plan.tied_peer = p.has_embedding ? pp.size() - 1 : 0;
    plan.tied_offset = wte.offset;
    plan.tied_count = wte.size;
  }
  plan.dp_count = layout.total();
  return plan;
}

void synchronize_gradients(const GradientSyncPlan& plan, float* grads,
                           const ProcessGroups& groups) {
  for (const auto& [offset, count] : plan.tp_sums)
    groups.tp().all_reduce_sum(grads + offset, count);
  groups.dp().all_reduce_sum(grads, plan.dp_count);
  if (plan.tied_peer >= 0) {
    std::vector<float> theirs(plan.tied_count);
    float* mine = grads + plan.tied_offset;
    groups.pp().send_recv(mine, plan.tied_count, plan.tied_peer, theirs.data(), plan.tied_count,
                          plan.tied_peer);
    // a + b on one end, b + a on the other: bitwise the same sum.
    for (std::size_t i = 0; i < plan.tied_count; ++i) mine[i] += theirs[i];
  }
}

void synchronize_gradients(const Gpt<float>& model, float* grads, const ProcessGroups& groups) {
  synchronize_gradients(gradient_sync_plan(model, groups), grads, groups);
}

bool gradients_need_synchronizing(const Gpt<float>& model, const ProcessGroups& groups) {
  const ModelPartition& p = model.partition();
  return (p.sequence_parallel && p.tp_size > 1) || groups.pp().size() > 1 || groups.dp().size() > 1;
}

std::vector<std::pair<std::size_t, std::size_t>> gradient_norm_ranges(const Gpt<float>& model) {
  const bool tp_leader = model.partition().tp_rank == 0;
  std::vector<std::pair<std::size_t, std::size_t>> ranges;
  for (const TensorView& t : model.layout().tensors()) {
    if (is_tied_copy(model, t)) continue;
    if (replicated_over_tp(model, t) && !tp_leader) continue;
    ranges.emplace_back(t.offset, t.size);
  }
  return ranges;
}

double global_norm_from_sum(double local_sum_of_squares, const ProcessGroups& groups) {
  double sum = local_sum_of_squares;
  groups.tp().all_reduce_sum(&sum, 1);
  groups.pp().all_reduce_sum(&sum, 1);
  return std::sqrt(sum);
}

double global_gradient_norm(const Gpt<float>& model, const float* grads,
                            const ProcessGroups& groups) {
  double sum = 0;
  for (const auto& [offset, size] : gradient_norm_ranges(model))
    sum += cpu::sum_of_squares(grads + offset, static_cast<long>(size));
  return global_norm_from_sum(sum, groups);
}

bool writes_to_checkpoint(const Gpt<float>& model, const TensorView& t, const Mesh& mesh) {
  if (mesh.dp_rank() != 0 || is_tied_copy(model, t)) return false;
  return !replicated_over_tp(model, t) || mesh.tp_rank() == 0;
}

}  // namespace strata
