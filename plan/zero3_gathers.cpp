#include "plan/zero3_gathers.h"

namespace strata {

std::vector<SegmentGatherUse> zero3_gather_sequence(const ModelPartition& partition,
                                                    const SegmentIndex& index,
                                                    const std::vector<PipelineOp>& program) {
  std::vector<SegmentGatherUse> order;
  const auto add = [&](int segment, WeightUse use) { order.push_back({segment, use}); };
  // Chunk c's blocks follow those of the chunks before it in the rank's layout.
  std::vector<int> first_block(1, 0);
  for (int c = 0; c < partition.chunks(); ++c) {
    const LayerRange layers = partition.chunk_layers(c);
    first_block.push_back(first_block.back() + layers.end - layers.begin);
  }
  for (const PipelineOp& op : program) {
    const ModelPartition chunk = partition.chunk(op.chunk);
    const int first = first_block[static_cast<std::size_t>(op.chunk)];
    if (op.kind == PipelineOpKind::forward) {
      if (chunk.has_embedding) {
        add(index.wte, WeightUse::forward);
        add(index.wpe, WeightUse::forward);
      }
      for (int b = 0; b < chunk.layers(); ++b) add(index.block(first + b), WeightUse::forward);
      if (chunk.has_head) {
        add(index.lnf, WeightUse::forward);
        add(index.wte, WeightUse::forward);
      }
    } else if (op.kind == PipelineOpKind::backward ||
               op.kind == PipelineOpKind::backward_input) {  // W reads no weights
      if (chunk.has_head) {
        add(index.wte, WeightUse::backward);
        add(index.lnf, WeightUse::backward);
      }
      for (int b = chunk.layers() - 1; b >= 0; --b)
        add(index.block(first + b), WeightUse::backward);
    }
  }
  return order;
}

}  // namespace strata
