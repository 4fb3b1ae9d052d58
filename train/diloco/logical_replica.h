// Elastic DiLoCo with workers of different layouts (diloco.layouts: any; docs/ARCHITECTURE.md §2
// "Elastic DiLoCo"). The workers' ranks no longer correspond, so the group averages the logical
// model instead of shares: each worker job gathers its weights into a logical copy on its rank 0,
// which alone meets the other workers' rank 0 over Gloo and runs the outer step over the whole
// model (train/diloco/diloco.h on this copy, a MasterWeights), and scatters the result back.
//
// The logical model is ParameterLayout::for_gpt's: every tensor whole, in checkpoint order. A
// rank's element e of tensor t is logical element for_gpt.at(t).offset + t.slice.logical_index(e),
// so each tensor maps as runs of consecutive elements (a tensor-parallel slice: one run per row
// block). gather moves the elements each rank writes in a checkpoint (checkpoint_write_ranges:
// together every logical element once) to rank 0, which receives exactly the model; scatter sends
// each rank the elements it holds (its weights: under ZeRO < 3 the whole layout, under ZeRO-3 its
// shard; tensor-parallel replicas and the last stage's wte copy included). Both are one
// all_to_all_v on the job, counted by its communicator: a pull moves 4 · N bytes into rank 0 less
// rank 0's own part, a push 4 bytes per element every other rank holds. Rank 0 learns where every
// rank's runs sit once, when the replica is made.
//
// The outer state then lives on rank 0 for the logical model. Checkpoints keep their format: the
// state is scattered into each rank's share of its layout to be written (to_layout) and gathered
// back after a resume (to_logical), so a worker may resume with another layout.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "model/core/collectives.h"
#include "model/core/element_range.h"
#include "model/gpt_shape.h"
#include "model/parameter_layout.h"
#include "train/backend/master_weights.h"
#include "train/checkpoint/checkpoint.h"

namespace strata {

class LogicalReplica final : public MasterWeights {
 public:
  // Collective over `job` (every rank of this worker). `writes`: the elements of `layout` this
  // rank writes in a checkpoint; `held`: those it holds (a range of its layout, padding allowed).
  LogicalReplica(const ParameterLayout& layout, const GptShape& shape,
                 const std::vector<ElementRange>& writes, ElementRange held, Collectives& job);

  bool leads() const { return job_.rank() == 0; }
  const ParameterLayout& logical_layout() const { return logical_; }
  std::size_t size() const { return logical_.total(); }

  // On rank 0: the logical copy, as last pulled or written (elements past the model read 0).
  void read_master_weights(ElementRange range, float* out) override;
  void write_master_weights(ElementRange range, const float* in) override;

  // Collective: every rank's weights into rank 0's copy.
  void pull(MasterWeights& local);
  // Collective: rank 0's copy into every rank's weights.
  void push(MasterWeights& local);

  // Collective: values[i], element range.begin + i of this rank's layout (`range` covering its
  // writes), into the logical vector on rank 0 (empty on the others).
  std::vector<float> gather(const float* values, ElementRange range);
  // Collective: rank 0's logical vector (ignored elsewhere) to each rank's held elements, values[i]
  // the element held.begin + i (0 for padding).
  std::vector<float> scatter(const std::vector<float>& logical);
  // Collective: rank 0's value on every rank.
  std::int64_t from_leader(std::int64_t value);

  // Collective: outer-state buffers over the logical model on rank 0 (empty elsewhere: the same
  // names on every rank) as this rank's buffers over `share` of its layout (within `held`), and
  // back: buffers over `share` as rank 0's over the logical model, the other ranks' over an empty
  // range.
  std::vector<StateBuffer> to_layout(std::vector<StateBuffer> logical, ElementRange share);
  std::vector<StateBuffer> to_logical(std::vector<StateBuffer> local, ElementRange share);

  // Where a run of consecutive elements of a rank's layout sits in the logical model.
  struct Run {
    std::size_t local = 0, logical = 0, count = 0;
  };

 private:
  // Rank 0: every rank's runs (logical position and count), in each rank's order.
  std::vector<std::vector<Run>> runs_on_leader(const std::vector<Run>& mine);

  ParameterLayout logical_;
  ElementRange held_;
  Collectives& job_;
  std::vector<Run> write_runs_, held_runs_;
  ElementRange write_hull_;  // the writes' first to last element
  std::vector<std::vector<Run>> every_write_runs_, every_held_runs_;  // rank 0 only
  std::vector<float> copy_;                                           // rank 0 only
};

// The runs of `ranges` (sorted, disjoint elements of `layout`) in the logical layout `logical`, in
// layout order, neighbours that continue each other in both merged.
std::vector<LogicalReplica::Run> logical_runs(const ParameterLayout& layout,
                                              const ParameterLayout& logical,
                                              const std::vector<ElementRange>& ranges);

}  // namespace strata
