// AdamW with 8-bit moments (Dettmers et al. 2022, block-wise dynamic quantisation) on an element
// range of the flat parameter buffer (docs/ARCHITECTURE.md §2: optimizers). m and v are stored as
// one byte per element (model/kernels/dynamic_quant.h: m a signed code, v an unsigned one) and one
// fp32 scale per block; each update dequantises them, runs AdamW's element update in fp32
// (model/kernels/adamw_element.h, the same arithmetic as AdamW), and stores them again under the
// blocks' new scales. State: 2 bytes per element instead of 8.
//
// Blocks on logical coordinates. A block is optimizer.adamw8bit.block_size consecutive logical
// elements of one tensor (the last of a tensor may be short), so the blocks, and with them the
// codes and scales, are the same under every layout: ZeRO shards cut the flat buffer anywhere and
// tensor parallelism gives a rank a slice of rows or columns, and a block may then have elements
// on several ranks. Its scale is the largest magnitude of its new values over all of them: every
// rank computes the largest of the elements it holds for every block of its layout, the maxima are
// agreed by one all-reduce (max) over OptimizerGroups::owners and one over the tp group for the
// tensors it splits, and only then are the moments stored. The update is therefore computed twice
// (once for the maxima, once to store), which costs arithmetic but no memory; a run is the
// one-process run under every layout, and its checkpoints reshard exactly.
//
// Exchange per step: 16 bytes per block of the layout (m's and v's maxima, each the bits of a
// non-negative float as an int64, which order as the floats do) over the owners, and 16 per block
// of the split tensors over tp: 0.2% of the gradient's bytes at block_size 2048.
//
// Offload (optimizer.offload): the codes are one ChunkedState of two byte planes, visited twice
// per update (read only for the maxima, then to store); the scales stay in memory.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "train/optimizer/optimizer.h"

namespace strata {

class AdamW8bit final : public Optimizer {
 public:
  AdamW8bit(const ParameterLayout& layout, ElementRange range, const OptimizerConfig& config,
            OptimizerGroups groups);

  ElementRange range() const override { return range_; }
  void update(float* params, const float* grads, const OptimizerStep& step) override;
  // "m" (int8 codes) and "v" (uint8 codes) over the range, stored as int8 and uint8 datasets;
  // "m_scale" and "v_scale" per tensor of the layout (its blocks' scales).
  std::vector<StateBuffer> save() const override;
  void load(const std::vector<StateBuffer>& buffers) override;
  // The codes, the scales and the exchange buffer: 2 bytes per element, 24 per block.
  std::size_t state_bytes() const override;

 private:
  // Consecutive elements of the range in one block of one tensor.
  struct Segment {
    std::size_t at = 0;     // in the range
    std::size_t count = 0;  // elements
    std::size_t block = 0;  // in the scales
    bool decay = false;
  };
  // Runs `body(segment)` over the chunk's segments, in parallel.
  template <class Body>
  void for_segments(const ChunkedState::Chunk& c, Body body) const;

  ElementRange range_;
  OptimizerConfig config_;
  OptimizerGroups groups_;
  // The moments' codes (m int8, v uint8), where optimizer.offload keeps them.
  std::unique_ptr<ChunkedState> state_;
  std::vector<Segment> segments_;            // in element order, none across a chunk of the state
  std::vector<std::size_t> chunk_segments_;  // chunk k's: [chunk_segments_[k], [k + 1])
  std::size_t blocks_ = 0, split_blocks_begin_ = 0;  // blocks [begin, blocks_) of split tensors
  std::vector<TensorStatistic> scale_stats_;         // the layout's tensors: blocks each
  std::vector<float> m_scale_, v_scale_;
  std::vector<std::int64_t> maxima_;  // per block: m's, v's (float bits)
};

}  // namespace strata
