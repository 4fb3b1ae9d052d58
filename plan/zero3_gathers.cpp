#include "plan/zero3_gathers.h"

namespace strata {

std::vector<SegmentGatherUse> zero3_gather_sequence(const ModelPartition& partition,
                                                    const SegmentIndex& index,
                                                    const std::vector<PipelineOp>& program) {
  std::vector<SegmentGatherUse> order;
  const auto add = [&](int segment, WeightUse use) { order.push_back({segment, use}); };
  for (const PipelineOp& op : program) {
    if (op.kind == PipelineOpKind::forward) {
      if (partition.has_embedding) {
        add(index.wte, WeightUse::forward);
        add(index.wpe, WeightUse::forward);
      }
      for (int b = 0; b < partition.layers(); ++b) add(index.block(b), WeightUse::forward);
      if (partition.has_head) {
        add(index.lnf, WeightUse::forward);
        add(index.wte, WeightUse::forward);
      }
    } else if (op.kind == PipelineOpKind::backward ||
               op.kind == PipelineOpKind::backward_input) {  // W reads no weights
      if (partition.has_head) {
        add(index.wte, WeightUse::backward);
        add(index.lnf, WeightUse::backward);
      }
      for (int b = partition.layers() - 1; b >= 0; --b) add(index.block(b), WeightUse::backward);
    }
  }
  return order;
}

}  // namespace strata
