// Checkpoints written as slabs of element ranges: the same training state written by 1, 2, 4 and
// 8 owners (each writing its checkpoint_write_ranges share into one file, one after another), and
// by tensor-parallel partitions with several owners each, gives the same logical tensors and
// checksums as one process writing everything; any layout reads back exactly its ranges.
#include <gtest/gtest.h>

#include <map>
#include <random>
#include <string>
#include <vector>

#include "data/hdf5_handle.h"
#include "parallel/mesh/reduction_plan.h"
#include "tests/support/test_support.h"
#include "train/checkpoint/checkpoint.h"
#include "train/checkpoint/checkpoint_seal.h"

namespace strata {
namespace {

const GptShape kShape{2, 4, 32, 16, 200};

// Layout-independent state: parameters by the GPT initialisation, moments by a hash of the
// logical element, so every partition holds the same logical values.
std::vector<StateBuffer> state_of(const ParameterLayout& layout, std::size_t buffer_size) {
  std::vector<StateBuffer> buffers{
      {"model", {0, buffer_size}, std::vector<float>(buffer_size)},
      {"optimizer/m", {0, buffer_size}, std::vector<float>(buffer_size)},
      {"optimizer/v", {0, buffer_size}, std::vector<float>(buffer_size)}};
  initialize_gpt_parameters(layout, kShape, 9, buffers[0].values.data());
  for (const TensorView& t : layout.tensors())
    for (std::size_t i = 0; i < t.size; ++i) {
      const auto g =
          static_cast<std::uint64_t>(t.slice.logical_index(static_cast<std::int64_t>(i)));
      const std::uint64_t h = (g + 1) * 0x9E3779B97F4A7C15ull ^ std::hash<std::string>()(t.name);
      buffers[1].values[t.offset + i] = static_cast<float>(h % 1000) / 1000.0f - 0.5f;
      buffers[2].values[t.offset + i] = static_cast<float>(h % 777) / 777.0f;
    }
  return buffers;
}

ModelPartition tp_partition(int tp_rank, int tp_size) {
  ModelPartition p = ModelPartition::whole(kShape);
  p.tp_rank = tp_rank;
  p.tp_size = tp_size;
  return p;
}

// Writes one checkpoint from tp_size partitions with `owners` writers each.
std::string write_from(const std::string& path, int tp_size, int owners) {
  const CheckpointMeta meta{"config: test", CheckpointState{3, 96, 9, 1.0, 3, -1}, "", {}};
  bool created = false;
  for (int tp = 0; tp < tp_size; ++tp) {
    const ModelPartition p = tp_partition(tp, tp_size);
    const ParameterLayout layout = ParameterLayout::for_partition(kShape, p);
    const std::vector<StateBuffer> buffers = state_of(layout, layout.padded_total(owners));
    if (!created) create_checkpoint_file(path, kShape, meta, state_datasets({}, buffers));
    created = true;
    for (int owner = 0; owner < owners; ++owner)
      write_checkpoint_elements(path,
                                {&layout,
                                 kShape,
                                 checkpoint_write_ranges(layout, p, layout.shard(owner, owners)),
                                 nullptr,
                                 {}},
                                buffers);
  }
  seal_checkpoint_file(path);
  return path;
}

// Every dataset's values and checksum attribute.
std::map<std::string, std::pair<std::vector<float>, std::int64_t>> contents(
    const std::string& path) {
  std::map<std::string, std::pair<std::vector<float>, std::int64_t>> out;
  H5File file = H5File::open_read(path);
  const ParameterLayout whole = ParameterLayout::for_gpt(kShape);
  for (const std::string group : {"/model/", "/optimizer/m/", "/optimizer/v/"})
    for (const TensorView& t : whole.tensors()) {
      const std::string name = group + t.name;
      H5Id dataset = open_dataset(file.id(), name);
      out[name] = {read_dataset_f32(file.id(), name),
                   read_attribute_i64(dataset.get(), "checksum")};
    }
  return out;
}

TEST(CheckpointSlabs, AnyNumberOfOwnersAssemblesTheSameTensors) {
  testing::TempDir dir("checkpoint_slabs");
  const auto reference = contents(write_from(dir / "one.h5", 1, 1));
  for (int tp : {1, 2, 4})
    for (int owners : {1, 2, 4, 8}) {
      const std::string path =
          dir / ("tp" + std::to_string(tp) + "_owners" + std::to_string(owners) + ".h5");
      EXPECT_EQ(contents(write_from(path, tp, owners)), reference)
          << "tp " << tp << ", " << owners << " owners";
    }
}

TEST(CheckpointSlabs, WriteRangesCoverEveryLogicalElementOnce) {
  for (int tp : {1, 2, 4})
    for (int owners : {1, 3, 8}) {
      std::map<std::string, std::vector<int>> written;
      for (int r = 0; r < tp; ++r) {
        const ModelPartition p = tp_partition(r, tp);
        const ParameterLayout layout = ParameterLayout::for_partition(kShape, p);
        for (int owner = 0; owner < owners; ++owner)
          for (const ElementRange& w :
               checkpoint_write_ranges(layout, p, layout.shard(owner, owners)))
            for (const TensorView& t : layout.tensors()) {
              auto& counts = written[t.name];
              counts.resize(static_cast<std::size_t>(t.slice.logical_size()));
              const ElementRange part = intersect(w, {t.offset, t.offset + t.size});
              for (std::size_t i = part.begin; i < part.end; ++i)
                ++counts[static_cast<std::size_t>(
                    t.slice.logical_index(static_cast<std::int64_t>(i - t.offset)))];
            }
      }
      for (const auto& [name, counts] : written)
        for (std::size_t i = 0; i < counts.size(); ++i)
          ASSERT_EQ(counts[i], 1) << "tp " << tp << " owners " << owners << " " << name << i;
    }
}

TEST(CheckpointSlabs, ALayoutReadsBackExactlyItsRanges) {
  testing::TempDir dir("checkpoint_read_ranges");
  const std::string path = write_from(dir / "ckpt.h5", 2, 3);
  const ModelPartition p = tp_partition(1, 4);
  const ParameterLayout layout = ParameterLayout::for_partition(kShape, p);
  const std::vector<StateBuffer> expected = state_of(layout, layout.padded_total(4));
  // A ZeRO-like owner: the whole parameters, moments of its shard only.
  const ElementRange shard = layout.shard(2, 4);
  std::vector<StateBuffer> buffers{{"model", {0, layout.padded_total(4)}, {}},
                                   {"optimizer/m", shard, {}},
                                   {"optimizer/v", shard, {}}};
  const CheckpointMeta meta = read_checkpoint(path, layout, buffers);
  EXPECT_EQ(meta.state.step, 3);
  EXPECT_EQ(buffers[0].values, expected[0].values);
  for (int b : {1, 2})
    EXPECT_EQ(buffers[b].values, std::vector<float>(expected[b].values.begin() + shard.begin,
                                                    expected[b].values.begin() + shard.end));
}

}  // namespace
}  // namespace strata
