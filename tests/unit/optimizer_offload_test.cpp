// optimizer.offload (train/optimizer/chunked_state.h): AdamW's state in an arena of its own
// (host) or in a file streamed through three chunks (disk) updates bit for bit as in place, on
// whole buffers and ZeRO shards, with chunks that cut tensors and decayed runs; the stream keeps
// every chunk's values, holds three chunks in memory, leaves no file behind, and says which
// directory it cannot use.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <vector>

#include "model/core/error.h"
#include "plan/optimizer_state.h"
#include "tests/support/optimizer_runs.h"
#include "tests/support/test_support.h"
#include "train/optimizer/chunked_state.h"
#include "train/optimizer/optimizer.h"

namespace strata {
namespace {

namespace fs = std::filesystem;
using testing::kOptimizerShape;

OptimizerConfig offload_config(OptimizerOffload where, const std::string& dir) {
  OptimizerConfig config;
  config.weight_decay = 0.1;
  config.offload = where;
  config.offload_dir = dir;
  config.offload_chunk = 1024;  // the test model's 40k elements in 40 chunks
  return config;
}

TEST(ChunkedState, TheDiskStreamKeepsEveryChunkAndLeavesNoFile) {
  const testing::TempDir dir("chunked_state");
  const std::size_t elements = 5000;  // 4 whole chunks of 1024 and a short one
  auto state = ChunkedState::make(OptimizerOffload::disk, elements, 1024, dir.str());
  EXPECT_EQ(state->resident_bytes(), 3 * 2 * 1024 * sizeof(float));
  // The state starts at zero; every visit sees the values the last one left.
  for (int pass = 0; pass < 3; ++pass) {
    std::size_t seen = 0, chunks = 0;
    state->visit([&](std::size_t first, std::size_t count, float* m, float* v) {
      EXPECT_EQ(first, seen);
      for (std::size_t i = 0; i < count; ++i) {
        ASSERT_EQ(m[i], static_cast<float>(pass * (first + i))) << first + i;
        ASSERT_EQ(v[i], static_cast<float>(pass * 2 * (first + i)));
        m[i] = static_cast<float>((pass + 1) * (first + i));
        v[i] = static_cast<float>((pass + 1) * 2 * (first + i));
      }
      seen += count;
      ++chunks;
    });
    EXPECT_EQ(seen, elements);
    EXPECT_EQ(chunks, 5u);
  }
  std::vector<float> m(elements), v(elements);
  state->read_all(m.data(), v.data());
  EXPECT_EQ(m[4999], 3.0f * 4999);
  EXPECT_EQ(v[1024], 6.0f * 1024);
  for (float& x : m) x = -x;
  state->write_all(m.data(), v.data());
  std::vector<float> back(elements), back_v(elements);
  state->read_all(back.data(), back_v.data());
  EXPECT_EQ(back, m);
  EXPECT_EQ(back_v, v);
  // The file is never visible: nothing to clean up after a kill.
  EXPECT_TRUE(fs::is_empty(dir.str())) << "a state file is visible in " << dir.str();
}

TEST(ChunkedState, ADirectoryItCannotUseIsAnError) {
  const testing::TempDir dir("chunked_state_bad");
  const std::string file = dir.str() + "/a_file";
  { std::ofstream(file) << "x"; }
  try {
    ChunkedState::make(OptimizerOffload::disk, 10, 1024, file);
    FAIL() << "no error for a directory that is a file";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("optimizer.offload_dir: cannot create the optimizer's "
                                         "state file in '" +
                                         file + "'"),
              std::string::npos)
        << e.what();
  }
}

// Whole buffers and ZeRO shards of 3 ranks, with gradient scale 0.5 (the harness's runs).
TEST(OptimizerOffload, HostAndDiskUpdateBitForBitAsInPlace) {
  const testing::TempDir dir("offload");
  const ParameterLayout layout = ParameterLayout::for_gpt(kOptimizerShape);
  for (int shards : {1, 3}) {
    const std::size_t buffer = layout.padded_total(shards);
    for (int r = 0; r < shards; ++r) {
      const ElementRange range = layout.shard(r, shards);
      const auto in_place = testing::optimizer_run(
          layout, range, buffer, offload_config(OptimizerOffload::none, ""), {}, 0.5);
      for (OptimizerOffload where : {OptimizerOffload::host, OptimizerOffload::disk}) {
        SCOPED_TRACE(std::string(kOptimizerOffloadChoices.word(where)) + " shard " +
                     std::to_string(r) + " of " + std::to_string(shards));
        const OptimizerConfig config = offload_config(where, dir.str());
        EXPECT_EQ(testing::optimizer_run(layout, range, buffer, config, {}, 0.5), in_place);
        // Its state saves and loads like AdamW's in place.
        const auto optimizer = make_optimizer(layout, range, config, {});
        auto reference =
            make_optimizer(layout, range, offload_config(OptimizerOffload::none, ""), {});
        std::vector<float> params = testing::layout_values(layout, buffer, 1), same = params;
        const std::vector<float> grads = testing::layout_values(layout, buffer, 7);
        optimizer->update(params.data() + range.begin, grads.data() + range.begin, {1e-2, 1, 1});
        reference->update(same.data() + range.begin, grads.data() + range.begin, {1e-2, 1, 1});
        const std::vector<StateBuffer> saved = optimizer->save();
        ASSERT_EQ(saved.size(), 2u);
        EXPECT_EQ(saved[0].values, reference->save()[0].values);
        EXPECT_EQ(saved[1].values, reference->save()[1].values);
        const auto loaded = make_optimizer(layout, range, config, {});
        loaded->load(saved);
        EXPECT_EQ(loaded->save()[1].values, saved[1].values);
        EXPECT_EQ(optimizer->state_bytes(), optimizer_state_bytes(layout, range, config));
      }
    }
  }
}

}  // namespace
}  // namespace strata
