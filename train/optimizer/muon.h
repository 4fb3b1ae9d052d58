// Muon (Jordan et al. 2024, the optimizer of the fastest public GPT-2 speedruns) on an element
// range of the flat parameter buffer (docs/ARCHITECTURE.md §2: optimizers). The blocks' matrices
// (attention qkv, or q, k and v, and projection, the MLP's and each expert's fc and proj) take
//   buf ← μ·buf + g;  u = g + μ·buf (Nesterov) or buf;  O = NewtonSchulz(u)  (newton_schulz.h)
//   θ ← θ·(1 − lr_m·weight_decay) − lr_m · √max(1, rows/cols) · O
// with lr_m = optimizer.muon.lr scaled by the schedule (lr_t / optimizer.lr). Everything else
// (wte, wpe, an untied lm_head, the router, gains and biases) takes AdamW with optimizer.lr,
// beta1, beta2 and eps.
//
// Split matrices. Newton-Schulz needs the whole matrix, which a ZeRO shard (the range cuts
// tensors anywhere) and tensor parallelism (a rank holds a block of rows or of columns) split.
// Every rank holding part of a matrix gathers its u exactly (no arithmetic, so as one process
// would see it): first the parts of the shard group's ranges (an uneven all-to-all over
// OptimizerGroups::owners, each part sent to every member), then, for the tp-split matrices, the
// slices of the tp group; each then runs Newton-Schulz on the whole matrix and applies its own
// elements. The bytes per step are, over the owners, each owner's part of every matrix sent to
// every other owner (the matrices' fp32 size times owners − 1, as ZeRO-1's parameter all-gather),
// and over tp each slice to every other tp rank; the Newton-Schulz GEMMs run on every holder.
//
// State: Muon's momentum over the range's matrix elements, AdamW's m and v over its other
// elements: 4 bytes per matrix element instead of AdamW's 8. Each is a ChunkedState of its own
// (optimizer.offload): the matrices' u is formed chunk by chunk of the momentum and a matrix is
// finished as soon as its last chunk is visited. save() writes both as element buffers "m" and
// "v" over the range (v zero on the matrices).
#pragma once

#include <memory>
#include <utility>
#include <vector>

#include "train/optimizer/optimizer.h"

namespace strata {

class Muon final : public Optimizer {
 public:
  // Collective over groups.owners when it is set (every owner's range is gathered).
  Muon(const ParameterLayout& layout, ElementRange range, const OptimizerConfig& config,
       OptimizerGroups groups);

  ElementRange range() const override { return range_; }
  void update(float* params, const float* grads, const OptimizerStep& step) override;
  std::vector<StateBuffer> save() const override;
  void load(const std::vector<StateBuffer>& buffers) override;
  std::size_t state_bytes() const override;

 private:
  // A matrix Muon updates, with its part in every owner's range.
  struct Matrix {
    TensorSlice slice;
    ElementRange elements;  // in the layout
    ElementRange held;      // the part in range_
    int rows = 0, cols = 0;
    bool split = false;                     // over tp
    std::size_t momentum_at = 0;            // its held part's place in momentum_
    std::vector<std::size_t> owner_counts;  // its elements in each owner's range, in order
  };
  // An AdamW run of the range (relative to range_.begin), where its m and v sit in
  // adamw_state_, and its decay.
  struct AdamWRun {
    ElementRange elements;
    std::size_t at = 0;
    bool decay = false;
  };

  // m and v over the range, as save() writes them.
  std::pair<std::vector<float>, std::vector<float>> state_over_range() const;

  // The matrix's u of the whole tensor in this tp rank's local order, gathered over the owners.
  std::vector<float> gather_owners(const Matrix& m, const std::vector<float>& held_u) const;
  // The whole logical matrix from the local tensor (gathered over tp when split).
  std::vector<float> gather_tp(const Matrix& m, const std::vector<float>& local) const;

  ElementRange range_;
  OptimizerConfig config_;
  OptimizerGroups groups_;
  std::vector<Matrix> matrices_;  // every matrix of the layout, in layout order
  std::vector<AdamWRun> adamw_;
  std::unique_ptr<ChunkedState> adamw_state_;  // m, v of the AdamW runs, one after another
  std::unique_ptr<ChunkedState> momentum_;     // of the matrices' held parts, in matrix order
};

}  // namespace strata
