// Adafactor (Shazeer & Stern 2018) on an element range of the flat parameter buffer, in the form
// of torch.optim.Adafactor (docs/ARCHITECTURE.md §2: optimizers): for every matrix (a 2-D
// logical tensor [rows, cols]) an exponential moving average of the row means and one of the
// column means of g², their product over the mean row as the variance (rows + cols values
// instead of AdamW's 2·rows·cols); for every vector its own average of g². The update
// g/√variance is divided by max(1, RMS(update)/clip_threshold) over the whole tensor, and the
// step size is optimizer.lr with its schedule, or with relative_step the paper's
// max(eps2, RMS(θ)) · min(lr, 1/√t). Decoupled weight decay θ ← θ·(1 − lr·weight_decay) on the
// decayed tensors, before the update; an optional first moment of the clipped update
// (optimizer.adafactor.beta1 > 0). Element arithmetic: model/kernels/adafactor_element.h.
//
// Split tensors. A tensor's statistics need its whole rows and columns, which a ZeRO shard (the
// range cuts tensors anywhere) and tensor parallelism (a rank holds a block of rows or of
// columns) split. Every rank adds the g² of the elements it updates into its tensors' row and
// column sums in logical coordinates, then the sums are added over OptimizerGroups::owners (the
// ranks tiling the layout) and, for the tensors tensor parallelism splits, over the tp group:
// each rank then holds the whole statistics of every tensor it updates, equal to one process's
// up to the order of the additions (done in double), and so do the tensor-wide sums of u² and θ².
// The bytes per step are two all-reduces of Σ(rows + cols) + Σ vector sizes doubles over the
// layout's tensors (the statistics) and 2 doubles per tensor (the RMS sums), counted like every
// collective. The tied wte is summed in an all-reduce of its own, so that the two pipeline ends,
// whose buffers differ, add its sums in the same order and keep their copies equal.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "train/optimizer/optimizer.h"

namespace strata {

class Adafactor final : public Optimizer {
 public:
  Adafactor(const ParameterLayout& layout, ElementRange range, const OptimizerConfig& config,
            OptimizerGroups groups);

  ElementRange range() const override { return range_; }
  void update(float* params, const float* grads, const OptimizerStep& step) override;
  // "row" and "col" (each matrix's), "v" (each vector's): per-tensor statistics; "m" over the
  // range when beta1 > 0.
  std::vector<StateBuffer> save() const override;
  void load(const std::vector<StateBuffer>& buffers) override;
  std::size_t state_bytes() const override;

 private:
  // A tensor of the layout, and where its numbers sit in the buffers below.
  struct Tensor {
    TensorSlice slice;
    ElementRange elements;  // in the layout
    ElementRange held;      // the part in range_ (empty: this rank keeps no statistics of it)
    std::int64_t rows = 1, cols = 1;  // logical [rows, cols]; a vector is [1, size]
    bool matrix = false, decay = false, split = false;
    std::size_t sums_at = 0;   // in sums_: row sums then column sums (a vector: its g²)
    std::size_t norms_at = 0;  // in norms_: Σu², Σθ²
    std::size_t stats_at = 0;  // in row_ (a matrix) or v_ (a vector), when held
    std::size_t col_at = 0;    // in col_ (a matrix), when held
  };
  // The sections of sums_ (or norms_) summed apart: [0, a) the tied wte, [a, b) the other whole
  // tensors, [b, end) those split over tp.
  struct Sections {
    std::size_t wte_end = 0, split_begin = 0;
  };

  // Adds `values` over the owners, then the split tensors' part over tp.
  void sum_over_groups(std::vector<double>& values, const Sections& sections) const;
  // The tensor's g² sums (grads of the range, scaled) into sums_.
  void add_squares(const Tensor& t, const float* grads, float grad_scale);
  // Updates the held tensor's statistics from the summed sums_ (weight w = 1 − β2_t); returns
  // max(mean of its row statistics, eps1) (1 for a vector).
  float update_statistics(const Tensor& t, float weight);
  float variance(const Tensor& t, std::int64_t logical, float row_mean) const;

  ElementRange range_;
  OptimizerConfig config_;
  OptimizerGroups groups_;
  std::vector<Tensor> tensors_;  // wte first, then the whole tensors, then the split ones
  Sections sums_sections_, norms_sections_;
  std::vector<double> sums_, norms_;
  std::vector<float> row_, col_, v_;
  // The first moment over the range (beta1 > 0; else no planes), where optimizer.offload keeps
  // it; the statistics above stay in memory.
  std::unique_ptr<ChunkedState> m_;
  std::vector<TensorStatistic> row_stats_, col_stats_, v_stats_;
};

}  // namespace strata
