// The logical replica of elastic DiLoCo workers of any layout (train/diloco/logical_replica.h), on
// ranks that are threads: the weights of tensor-parallel × pipeline partitions, and of ZeRO-3
// shards, reach rank 0 as the logical model, every element where ParameterLayout::for_gpt puts
// it; rank 0's model reaches every rank's elements (tensor-parallel replicas and the last stage's
// wte copy included, padding 0); the outer state round-trips through the ranks' shares.
#include <gtest/gtest.h>

#include <vector>

#include "tests/support/thread_group.h"
#include "train/checkpoint/checkpoint.h"
#include "train/diloco/logical_replica.h"

namespace strata {
namespace {

const GptShape kShape{2, 4, 32, 16, 200};

// A rank's master weights over `held` of its layout, as a backend holds them.
class HeldWeights final : public MasterWeights {
 public:
  explicit HeldWeights(ElementRange held) : held_(held), values_(held.size(), 0.0f) {}
  void read_master_weights(ElementRange range, float* out) override {
    for (std::size_t e = range.begin; e < range.end; ++e)
      out[e - range.begin] = e >= held_.begin && e < held_.end ? values_[e - held_.begin] : 0.0f;
  }
  void write_master_weights(ElementRange range, const float* in) override {
    for (std::size_t e = range.begin; e < range.end; ++e)
      if (e >= held_.begin && e < held_.end) values_[e - held_.begin] = in[e - range.begin];
  }
  std::vector<float>& values() { return values_; }

 private:
  ElementRange held_;
  std::vector<float> values_;
};

// The logical index of every element of `layout` (-1 past its tensors).
std::vector<double> logical_indices(const ParameterLayout& layout, ElementRange range) {
  const ParameterLayout logical = ParameterLayout::for_gpt(kShape);
  std::vector<double> index(range.size(), -1);
  for (const TensorView& t : layout.tensors())
    for (std::size_t i = 0; i < t.size; ++i) {
      const std::size_t e = t.offset + i;
      if (e >= range.begin && e < range.end)
        index[e - range.begin] = static_cast<double>(
            logical.at(t.name).offset +
            static_cast<std::size_t>(t.slice.logical_index(static_cast<std::int64_t>(i))));
    }
  return index;
}

// tp 2 × pp 2: rank r is tensor rank r % 2 of stage r / 2 (one layer each; the last stage holds
// the head's copy of wte).
ModelPartition partition_of(int rank) {
  ModelPartition p = ModelPartition::whole(kShape);
  p.tp_rank = rank % 2;
  p.tp_size = 2;
  const int stage = rank / 2;
  p.layer_begin = stage;
  p.layer_end = stage + 1;
  p.has_embedding = stage == 0;
  p.has_head = stage == 1;
  return p;
}

TEST(LogicalReplica, TensorAndPipelineSlicesGatherToTheLogicalModelAndScatterBack) {
  const std::size_t n = ParameterLayout::for_gpt(kShape).total();
  testing::ThreadGroup group(4);
  std::vector<std::vector<float>> gathered(4), scattered(4);
  std::vector<std::vector<double>> indices(4);
  group.run([&](int r) {
    testing::ThreadRank job(group, r);
    const ModelPartition p = partition_of(r);
    const ParameterLayout layout = ParameterLayout::for_partition(kShape, p);
    const ElementRange whole{0, layout.total()};
    HeldWeights weights(whole);
    indices[static_cast<std::size_t>(r)] = logical_indices(layout, whole);
    for (std::size_t e = 0; e < whole.size(); ++e)
      weights.values()[e] = static_cast<float>(indices[static_cast<std::size_t>(r)][e]);
    LogicalReplica replica(layout, kShape, checkpoint_write_ranges(layout, p, whole), whole, job);
    EXPECT_EQ(replica.leads(), r == 0);
    replica.pull(weights);
    if (replica.leads()) {
      gathered[0].resize(n);
      replica.read_master_weights({0, n}, gathered[0].data());
      std::vector<float> model(n);
      for (std::size_t i = 0; i < n; ++i) model[i] = -1.0f - static_cast<float>(i);
      replica.write_master_weights({0, n}, model.data());
    }
    replica.push(weights);
    scattered[static_cast<std::size_t>(r)] = weights.values();
  });
  for (std::size_t i = 0; i < n; ++i)
    ASSERT_EQ(gathered[0][i], static_cast<float>(i)) << "logical element " << i;
  for (int r = 0; r < 4; ++r) {
    const auto& index = indices[static_cast<std::size_t>(r)];
    const auto& values = scattered[static_cast<std::size_t>(r)];
    for (std::size_t e = 0; e < values.size(); ++e)
      ASSERT_EQ(values[e], -1.0f - static_cast<float>(index[e]))
          << "rank " << r << " element " << e;
  }
  // The last stage holds wte too: its copy came back as well.
  EXPECT_TRUE(ParameterLayout::for_partition(kShape, partition_of(3)).has("wte"));
}

// dp 2 under ZeRO-3: each rank holds its padded shard; the outer state's buffers over the shares
// gather into the logical model and scatter back unchanged, padding 0.
TEST(LogicalReplica, ShardedStateRoundTripsThroughTheLogicalModel) {
  const ParameterLayout layout = ParameterLayout::for_gpt(kShape);
  const ModelPartition p = ModelPartition::whole(kShape);
  testing::ThreadGroup group(2);
  std::vector<std::vector<StateBuffer>> logical(2), back(2);
  std::vector<std::vector<float>> shares(2);
  group.run([&](int r) {
    testing::ThreadRank job(group, r);
    const ElementRange share = layout.shard(r, 2);
    LogicalReplica replica(layout, kShape, checkpoint_write_ranges(layout, p, share), share, job);
    std::vector<float>& values = shares[static_cast<std::size_t>(r)];
    values.assign(share.size(), 0.0f);
    for (std::size_t e = share.begin; e < std::min(share.end, layout.total()); ++e)
      values[e - share.begin] = 0.25f * static_cast<float>(e) - 3.0f;
    logical[static_cast<std::size_t>(r)] = replica.to_logical(
        {{"outer/anchor", share, values}, {"outer/momentum", share, values}}, share);
    back[static_cast<std::size_t>(r)] =
        replica.to_layout(logical[static_cast<std::size_t>(r)], share);
  });
  ASSERT_EQ(logical[0].size(), 2u);
  EXPECT_EQ(logical[0][0].range, (ElementRange{0, layout.total()}));
  EXPECT_EQ(logical[1][0].range, (ElementRange{0, 0}));
  EXPECT_TRUE(logical[1][0].values.empty());
  for (std::size_t i = 0; i < layout.total(); ++i)
    ASSERT_EQ(logical[0][1].values[i], 0.25f * static_cast<float>(i) - 3.0f) << i;
  for (int r = 0; r < 2; ++r)
    for (const StateBuffer& b : back[static_cast<std::size_t>(r)]) {
      EXPECT_EQ(b.range, layout.shard(r, 2));
      EXPECT_EQ(b.values, shares[static_cast<std::size_t>(r)]) << b.name << " of rank " << r;
    }
}

}  // namespace
}  // namespace strata
