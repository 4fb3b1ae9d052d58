// Optimizers over an element range of the flat parameter buffer (docs/ARCHITECTURE.md §2: state on
// element ranges). An optimizer owns a contiguous range [begin, end) of the layout (the whole
// buffer, or this rank's ZeRO shard) and holds state for that range only; update() reads the
// gradients and writes the fp32 master weights of the range. The update count lives in the training
// state and is passed in, so optimizers are interchangeable and checkpoints restore it once.
//
// AdamW is one implementation; Adafactor (train/optimizer/adafactor.h), AdamW with 8-bit moments
// (adamw8bit.h) and Muon (muon.h) are the others; make_optimizer builds the one optimizer.name
// names. Weight decay applies to the layout's decayed ranges (2-D
// weights); gradient clipping scales by grad_clip / ‖g‖ when the global norm exceeds grad_clip
// (clip_factor).
//
// An optimizer whose update needs more than its elements (a statistic of a whole tensor, which
// ZeRO shards and tensor parallelism split) sums partial statistics over OptimizerGroups: the
// ranks sharing the range's tensors (the ZeRO shard group) and the tensor-parallel group.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "model/core/collectives.h"
#include "model/core/element_range.h"
#include "model/kernels/cpu/adamw.h"
#include "model/parameter_layout.h"
#include "plan/config.h"
#include "plan/optimizer_state.h"
#include "train/checkpoint/checkpoint.h"
#include "train/optimizer/chunked_state.h"

namespace strata {

// One update's inputs: learning rate, the factor the gradients are multiplied by first (clipping
// and loss-scale removal), and the 1-based update count (bias corrections).
struct OptimizerStep {
  double lr = 0;
  double grad_scale = 1;
  long long count = 1;
  // Test hook (train/core/test_hooks.h, kill_in_update): this update SIGKILLs its process in the
  // visit of a chunk after the first, weights and offloaded state half updated.
  bool test_kill_after_first_chunk = false;
};

// The groups an optimizer sums partial statistics over (null: none to sum over).
struct OptimizerGroups {
  // The ranks whose ranges tile the same tensors: the ZeRO shard group when range is a shard;
  // null when the range is the whole layout.
  Collectives* owners = nullptr;
  // The tensor-parallel group, whose members hold slices of the split tensors; null at tp 1.
  Collectives* tp = nullptr;
};

class Optimizer {
 public:
  virtual ~Optimizer() = default;
  // The layout elements this optimizer updates.
  virtual ElementRange range() const = 0;
  // params and grads hold the range's elements (params[i] is layout element range().begin + i).
  virtual void update(float* params, const float* grads, const OptimizerStep& step) = 0;
  // Its state as buffers (train/checkpoint/checkpoint.h StateBuffer; checkpoints store buffer
  // <name> as /optimizer/<name>/<tensor>): per element over range() (element i belonging to
  // layout element range().begin + i), or per tensor. save() copies the values out, in a fixed
  // order of names; load() copies buffers of those names and shapes back in (any subset; an error
  // for a buffer it does not hold). The values may be held otherwise (compacted, quantized): the
  // buffers are the state's logical form, the same under any layout.
  virtual std::vector<StateBuffer> save() const = 0;
  virtual void load(const std::vector<StateBuffer>& buffers) = 0;
  // Bytes of state held (the memory account).
  virtual std::size_t state_bytes() const = 0;
  // save()'s buffers without their values.
  std::vector<StateBuffer> shapes() const;
};

class AdamW final : public Optimizer {
 public:
  // Owns `range` of `layout` (which may extend into padding past layout.total(): never decayed).
  AdamW(const ParameterLayout& layout, ElementRange range, const OptimizerConfig& config);

  ElementRange range() const override { return range_; }
  void update(float* params, const float* grads, const OptimizerStep& step) override;
  std::vector<StateBuffer> save() const override;
  void load(const std::vector<StateBuffer>& buffers) override;
  std::size_t state_bytes() const override { return state_->resident_bytes(); }

  // The decayed elements of the range, relative to range().begin; and the weight decay itself.
  const std::vector<ElementRange>& decayed() const { return decayed_; }
  const OptimizerConfig& config() const { return config_; }

 private:
  ElementRange range_;
  OptimizerConfig config_;
  std::vector<ElementRange> decayed_;
  // m and v, where optimizer.offload keeps them (train/optimizer/chunked_state.h).
  std::unique_ptr<ChunkedState> state_;
};

// AdamW's constants for one update (weight decay 0: set per run of decayed tensors).
cpu::AdamWHyper adamw_hyper(const OptimizerConfig& config, const OptimizerStep& step);

// Copies each of `buffers` into the one of `held` (name, values) it names: an error naming the
// buffer when none has its name or its values are not of that one's size (`optimizer` names the
// optimizer in it). The optimizers' load().
void load_state_values(const std::vector<StateBuffer>& buffers,
                       const std::vector<std::pair<std::string, std::vector<float>*>>& held,
                       const char* optimizer);

// The state of `part` (plan/optimizer_state.h chunked_parts) where config.offload keeps it.
std::unique_ptr<ChunkedState> make_chunked_state(const ChunkedPart& part,
                                                 const OptimizerConfig& config);
// The test hook of `step` (OptimizerStep::test_kill_after_first_chunk), called after each chunk
// (tests/mpi/optimizers_test.cpp).
void test_kill_in_update(const OptimizerStep& step, std::size_t chunk_first);

// The optimizer config.name names, on `range` of `layout`.
std::unique_ptr<Optimizer> make_optimizer(const ParameterLayout& layout, ElementRange range,
                                          const OptimizerConfig& config, OptimizerGroups groups);

// Factor that clips a gradient of global norm `norm` to `max_norm` (1 when below or disabled).
double clip_factor(double norm, double max_norm);

}  // namespace strata
