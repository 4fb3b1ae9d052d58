// One model's FP8 scaling state (docs/ARCHITECTURE.md §6, "FP8"): for each of its blocks, each
// FP8 GEMM (Fp8Layer) and each operand (Fp8Operand), the delayed recipe's amax history (the
// largest magnitudes of the last `history` steps, newest first) and the amax recorded so far in
// the current step. The other recipes keep nothing between GEMMs; the state then only answers
// which GEMMs run in FP8.
//
// The delayed recipe's step: begin_step() forgets what was recorded since the last one (evaluation,
// a skipped step); each cast records its operand's amax on this rank; end_step(), once the step is
// applied, takes the largest over the ranks that hold the same blocks (tensor, context and data
// parallel: so every layout keeps the same histories as one process) and pushes it into the
// histories. A step's amax that is not finite is pushed as 0, "nothing recorded" (the non-finite
// check skips such a step before). Until an operand's history holds a step, its casts scale by
// their own amax, as `tensorwise` does.
#pragma once

#include <array>
#include <cstddef>
#include <span>
#include <string>
#include <vector>

#include "model/core/collectives.h"
#include "model/fp8/fp8_recipe.h"
#include "model/gpt_shape.h"
#include "model/parameter_layout.h"

namespace strata {

class Fp8State {
 public:
  // `layers`: the model's blocks; `first_layer`: the global index of the first; `runs[l][g]`:
  // whether GEMM g of local block l multiplies in FP8 (Fp8Settings::runs on its logical shape).
  Fp8State(const Fp8Settings& settings, int first_layer,
           std::vector<std::array<bool, kFp8Layers>> runs);

  const Fp8Settings& settings() const { return settings_; }
  bool runs(int layer, Fp8Layer gemm) const {
    return runs_[static_cast<std::size_t>(layer)][static_cast<std::size_t>(gemm)];
  }
  Fp8Format format(Fp8Operand operand) const { return settings_.format(operand); }

  // Delayed: whether the operand's history holds a step (its casts then scale from it), and the
  // largest amax in it.
  bool has_history(int layer, Fp8Layer gemm, Fp8Operand operand) const;
  float history_amax(int layer, Fp8Layer gemm, Fp8Operand operand) const;
  // Delayed: this rank's amax of one cast of the operand, kept if the largest of the step.
  void record(int layer, Fp8Layer gemm, Fp8Operand operand, float amax);

  // The delayed recipe's operands one after another (site(layer, gemm, operand) < sites()), for
  // a device that keeps the step's amaxes itself (model/ops/cuda_ops_fp8.cu) and hands them over
  // (record_sites: each kept if the step's largest) before end_step.
  std::size_t sites() const { return step_.size(); }
  std::size_t site(int layer, Fp8Layer gemm, Fp8Operand operand) const {
    return (static_cast<std::size_t>(layer) * kFp8Layers + static_cast<std::size_t>(gemm)) *
               kFp8Operands +
           static_cast<std::size_t>(operand);
  }
  void record_sites(std::span<const float> amaxes);

  void begin_step();
  // The step's amaxes, the largest over each of `groups` (null entries skipped), pushed into the
  // histories. Collective over every group.
  void end_step(std::span<Collectives* const> groups);

  // The checkpoint's record of the histories (delayed; none otherwise): one statistic per FP8
  // GEMM of the model, named by its weight's tensor in `layout` ("h.3.attn.qkv.weight", or
  // h.3.attn.q.weight where q, k and v are tensors of their own), holding the input's, weight's
  // and grad_output's histories one after another (3·history values).
  std::vector<std::string> history_tensors(const ParameterLayout& layout) const;
  std::vector<float> histories() const;  // in history_tensors' order
  void set_histories(std::span<const float> values);

 private:
  Fp8Settings settings_;
  int first_layer_;
  std::vector<std::array<bool, kFp8Layers>> runs_;
  std::vector<float> history_;  // per site, `history` amaxes, newest first
  std::vector<float> step_;     // per site, this step's largest amax so far
};

// Which GEMMs of block `layer` (global index) of `shape` multiply in FP8: those `settings` runs at
// their weights' logical shapes; an MoE block's experts never.
std::array<bool, kFp8Layers> fp8_gemms_of_block(const Fp8Settings& settings, const GptShape& shape,
                                                int layer);

// In-place largest values over `group` of non-negative floats (amaxes; +infinity orders last).
void all_reduce_amax(Collectives& group, std::span<float> amaxes);

}  // namespace strata
