// optimizer.offload (train/optimizer/chunked_state.h): every optimizer's per-element state in an
// arena of its own (host) or in a file streamed through three chunks (disk) updates bit for bit
// as in place, on whole buffers and ZeRO shards, with chunks that cut tensors, decayed runs,
// 8-bit blocks and Muon's matrices; the stream keeps every chunk's values in planes of any width,
// holds three chunks in memory, leaves no file behind, and says which directory it cannot use.
#include <gtest/gtest.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <vector>

#include "model/core/error.h"
#include "plan/optimizer_state.h"
#include "tests/support/optimizer_runs.h"
#include "tests/support/test_support.h"
#include "tests/support/thread_group.h"
#include "train/optimizer/chunked_state.h"
#include "train/optimizer/optimizer.h"

namespace strata {
namespace {

namespace fs = std::filesystem;
using testing::kOptimizerShape;

OptimizerConfig offload_config(OptimizerName name, OptimizerOffload where, const std::string& dir) {
  OptimizerConfig config;
  config.name = name;
  config.weight_decay = 0.1;
  config.adafactor.beta1 = 0.9;  // so that Adafactor keeps a per-element state
  config.adamw8bit.block_size = 100;
  config.offload = where;
  config.offload_dir = dir;
  config.offload_chunk = 1024;  // the test model's 40k elements in 40 chunks
  return config;
}

// Planes of 4, 1 and 2 bytes: a float plane after a byte plane stays aligned, and the values of
// every plane survive the stream.
TEST(ChunkedState, TheDiskStreamKeepsEveryChunkAndLeavesNoFile) {
  const testing::TempDir dir("chunked_state");
  const std::size_t elements = 5001;  // 4 whole chunks of 1024 and a short, odd one
  auto state = ChunkedState::make(OptimizerOffload::disk, elements, {4, 1, 2}, 1024, dir.str());
  EXPECT_EQ(state->resident_bytes(), 3 * (4 + 1 + 2) * 1024u);
  EXPECT_EQ(state->resident_bytes(),
            3 * chunk_buffer_bytes(1024, {4, 1, 2}));  // what the planner counts
  // The state starts at zero; every visit sees the values the last one left.
  auto value = [](int pass, std::size_t i) { return static_cast<float>(pass * i); };
  for (int pass = 0; pass < 3; ++pass) {
    std::size_t seen = 0, chunks = 0;
    state->visit([&](const ChunkedState::Chunk& c) {
      EXPECT_EQ(c.first, seen);
      EXPECT_EQ(reinterpret_cast<std::uintptr_t>(c.plane<float>(0)) % alignof(float), 0u);
      EXPECT_EQ(reinterpret_cast<std::uintptr_t>(c.plane<std::uint16_t>(2)) % 2, 0u);
      for (std::size_t k = 0; k < c.count; ++k) {
        const std::size_t i = c.first + k;
        ASSERT_EQ(c.plane<float>(0)[k], value(pass, i)) << i;
        ASSERT_EQ(c.plane<std::uint8_t>(1)[k], static_cast<std::uint8_t>(pass * i)) << i;
        ASSERT_EQ(c.plane<std::uint16_t>(2)[k], static_cast<std::uint16_t>(pass * 3 * i)) << i;
        c.plane<float>(0)[k] = value(pass + 1, i);
        c.plane<std::uint8_t>(1)[k] = static_cast<std::uint8_t>((pass + 1) * i);
        c.plane<std::uint16_t>(2)[k] = static_cast<std::uint16_t>((pass + 1) * 3 * i);
      }
      seen += c.count;
      ++chunks;
    });
    EXPECT_EQ(seen, elements);
    EXPECT_EQ(chunks, 5u);
  }
  // A read-only visit writes nothing back.
  state->visit([](const ChunkedState::Chunk& c) { c.plane<float>(0)[0] = -1.0f; }, true);
  std::vector<float> a(elements);
  std::vector<std::uint8_t> b(elements);
  std::vector<std::uint16_t> h(elements);
  state->read_all({a.data(), b.data(), h.data()});
  EXPECT_EQ(a[0], 0.0f);
  EXPECT_EQ(a[5000], 3.0f * 5000);
  EXPECT_EQ(b[1024], static_cast<std::uint8_t>(3 * 1024));
  EXPECT_EQ(h[4097], static_cast<std::uint16_t>(9 * 4097));
  for (float& x : a) x = -x;
  state->write_all({a.data(), b.data(), h.data()});
  std::vector<float> back(elements);
  std::vector<std::uint8_t> back_b(elements);
  std::vector<std::uint16_t> back_h(elements);
  state->read_all({back.data(), back_b.data(), back_h.data()});
  EXPECT_EQ(back, a);
  EXPECT_EQ(back_b, b);
  EXPECT_EQ(back_h, h);
  // The file is never visible: nothing to clean up after a kill.
  EXPECT_TRUE(fs::is_empty(dir.str())) << "a state file is visible in " << dir.str();
}

TEST(ChunkedState, ADirectoryItCannotUseIsAnError) {
  const testing::TempDir dir("chunked_state_bad");
  const std::string file = dir.str() + "/a_file";
  { std::ofstream(file) << "x"; }
  try {
    ChunkedState::make(OptimizerOffload::disk, 10, {4, 4}, 1024, file);
    FAIL() << "no error for a directory that is a file";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("optimizer.offload_dir: cannot create the optimizer's "
                                         "state file in '" +
                                         file + "'"),
              std::string::npos)
        << e.what();
  }
}

// Each optimizer on the whole buffer and on ZeRO shards of 3 thread ranks (the shards' statistics
// and 8-bit maxima agreed over them), with gradient scale 0.5: the parameters after the harness's
// updates, the saved state and its round trip through load, and the memory the planner counts.
class EveryOffload : public ::testing::TestWithParam<OptimizerName> {};

TEST_P(EveryOffload, HostAndDiskUpdateBitForBitAsInPlace) {
  const testing::TempDir dir("offload");
  const ParameterLayout layout = ParameterLayout::for_gpt(kOptimizerShape);
  const OptimizerName name = GetParam();
  for (int shards : {1, 3}) {
    const std::size_t buffer = layout.padded_total(shards);
    // Per rank: the parameters after the run, the state after one more update, its reload.
    struct Result {
      std::vector<float> params;
      std::vector<StateBuffer> saved, reloaded;
      std::size_t state_bytes = 0, counted = 0;
    };
    auto run = [&](OptimizerOffload where) {
      const OptimizerConfig config = offload_config(name, where, dir.str());
      std::vector<Result> results(static_cast<std::size_t>(shards));
      testing::ThreadGroup group(shards);
      group.run([&](int r) {
        testing::ThreadRank owners(group, r);
        const OptimizerGroups groups{shards > 1 ? &owners : nullptr, nullptr};
        const ElementRange range = layout.shard(r, shards);
        Result& out = results[static_cast<std::size_t>(r)];
        out.params = testing::optimizer_run(layout, range, buffer, config, groups, 0.5);
        const auto optimizer = make_optimizer(layout, range, config, groups);
        std::vector<float> params = testing::layout_values(layout, buffer, 1);
        const std::vector<float> grads = testing::layout_values(layout, buffer, 7);
        optimizer->update(params.data() + range.begin, grads.data() + range.begin, {1e-2, 1, 1});
        out.saved = optimizer->save();
        const auto loaded = make_optimizer(layout, range, config, groups);
        loaded->load(out.saved);
        out.reloaded = loaded->save();
        out.state_bytes = optimizer->state_bytes();
        out.counted = optimizer_state_bytes(layout, range, config);
      });
      return results;
    };
    const std::vector<Result> in_place = run(OptimizerOffload::none);
    for (OptimizerOffload where : {OptimizerOffload::host, OptimizerOffload::disk}) {
      const std::vector<Result> offloaded = run(where);
      for (int r = 0; r < shards; ++r) {
        SCOPED_TRACE(std::string(kOptimizerOffloadChoices.word(where)) + " shard " +
                     std::to_string(r) + " of " + std::to_string(shards));
        const Result &got = offloaded[static_cast<std::size_t>(r)],
                     &want = in_place[static_cast<std::size_t>(r)];
        EXPECT_EQ(got.params, want.params);
        ASSERT_EQ(got.saved.size(), want.saved.size());
        for (std::size_t b = 0; b < got.saved.size(); ++b) {
          EXPECT_EQ(got.saved[b].name, want.saved[b].name);
          EXPECT_EQ(got.saved[b].values, want.saved[b].values) << got.saved[b].name;
          EXPECT_EQ(got.reloaded[b].values, got.saved[b].values) << got.saved[b].name;
        }
        EXPECT_EQ(got.state_bytes, got.counted);
        if (where == OptimizerOffload::disk && shards == 1) {
          EXPECT_LT(got.state_bytes, want.state_bytes);  // three chunks, not the whole state
        }
      }
    }
    for (const Result& r : in_place) EXPECT_EQ(r.state_bytes, r.counted);
  }
}

INSTANTIATE_TEST_SUITE_P(Optimizer, EveryOffload,
                         ::testing::Values(OptimizerName::adamw, OptimizerName::adafactor,
                                           OptimizerName::adamw8bit, OptimizerName::muon),
                         [](const auto& info) {
                           return std::string(kOptimizerNameChoices.word(info.param));
                         });

}  // namespace
}  // namespace strata
