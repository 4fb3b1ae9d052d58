// Who serves which stage of a swarm (parallel/swarm/stage_registry.h) on a file store, without
// training: peers as objects of one process, each with its own heartbeat. Joining and listing by
// stage, a deathrattle on leaving, a silent peer declared dead by an observer after the timeout,
// settings that differ refused, and swarm.stage auto's choice of the least served stage.
#include "parallel/swarm/stage_registry.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <memory>
#include <string>
#include <vector>

namespace strata {
namespace {

class SwarmRegistryTest : public ::testing::Test {
 protected:
  ~SwarmRegistryTest() override { std::filesystem::remove_all(path_); }

  StageRegistrySettings settings(const std::string& shared = "model: a") const {
    StageRegistrySettings s;
    s.store_url = "file://" + path_.string();
    s.group = "swarm";
    s.stages = 3;
    s.timeout_s = 0.5;
    s.shared_settings = shared;
    return s;
  }
  std::unique_ptr<StageRegistry> peer(int stage, const std::string& endpoint) const {
    auto registry = std::make_unique<StageRegistry>(settings());
    registry->join(stage, endpoint);
    return registry;
  }
  static std::vector<std::int64_t> ids(const std::vector<SwarmPeerRecord>& peers) {
    std::vector<std::int64_t> out;
    for (const SwarmPeerRecord& p : peers) out.push_back(p.id);
    return out;
  }

  std::filesystem::path path_ = std::filesystem::temp_directory_path() /
                                ("swarm_registry_" + std::to_string(::getpid()) + "_" +
                                 ::testing::UnitTest::GetInstance()->current_test_info()->name());
};

TEST_F(SwarmRegistryTest, PeersJoinInOrderAndAreListedByStage) {
  auto a = peer(1, "tcp://127.0.0.1:1");
  auto b = peer(2, "tcp://127.0.0.1:2");
  auto c = peer(1, "tcp://127.0.0.1:3");
  EXPECT_EQ(a->id(), 0);
  EXPECT_EQ(b->id(), 1);
  EXPECT_EQ(c->id(), 2);
  const std::vector<SwarmPeerRecord> stage1 = b->stage_peers(1);
  ASSERT_EQ(ids(stage1), (std::vector<std::int64_t>{0, 2}));
  EXPECT_EQ(stage1[1].endpoint, "tcp://127.0.0.1:3");
  EXPECT_EQ(ids(a->stage_peers(2)), (std::vector<std::int64_t>{1}));
  EXPECT_TRUE(a->stage_peers(0).empty());
  // A move rewrites its record.
  c->move(0);
  EXPECT_EQ(ids(a->stage_peers(0)), (std::vector<std::int64_t>{2}));
  EXPECT_EQ(ids(a->stage_peers(1)), (std::vector<std::int64_t>{0}));
}

TEST_F(SwarmRegistryTest, ALeavingPeerIsGoneAtOnceWithItsReason) {
  auto a = peer(0, "tcp://127.0.0.1:1");
  auto b = peer(1, "tcp://127.0.0.1:2");
  b->leave("finished");
  EXPECT_EQ(ids(a->live_peers()), (std::vector<std::int64_t>{0}));
  const auto why = a->store().get("swarm/dead/1");
  ASSERT_TRUE(why.has_value());
  EXPECT_EQ(store_text(*why), "finished");
}

TEST_F(SwarmRegistryTest, ASilentPeerIsDeclaredDeadAfterTheTimeout) {
  auto observer = peer(0, "tcp://127.0.0.1:1");
  // A peer killed without a deathrattle: its record and a heartbeat that never moves again.
  RendezvousStore& store = observer->store();
  const std::int64_t silent = store.add("swarm/next_peer", 1) - 1;
  store.set("swarm/heartbeat/" + std::to_string(silent), store_bytes("7"));
  store.set("swarm/peer/" + std::to_string(silent), store_bytes("1 tcp://127.0.0.1:9"));
  EXPECT_EQ(ids(observer->stage_peers(1)), (std::vector<std::int64_t>{silent}));
  ::usleep(700000);  // the timeout, 0.5 s, on the observer's clock
  EXPECT_TRUE(observer->stage_peers(1).empty());
  const auto why = store.get("swarm/dead/" + std::to_string(silent));
  ASSERT_TRUE(why.has_value());
  EXPECT_EQ(store_text(*why), "missed heartbeats");
  // The live ones beat on their own threads meanwhile: the observer is still listed by another.
  auto other = peer(2, "tcp://127.0.0.1:2");
  ::usleep(700000);
  EXPECT_EQ(ids(other->live_peers()), (std::vector<std::int64_t>{0, silent + 1}));
}

TEST_F(SwarmRegistryTest, SettingsThatDifferAreRefused) {
  StageRegistry first(settings("model: a"));
  StageRegistrySettings mine = settings("model: b");
  mine.difference = [](const std::string& theirs) { return "theirs is '" + theirs + "'"; };
  try {
    StageRegistry second(mine);
    FAIL() << "a peer of other settings joined";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("theirs is 'model: a'"), std::string::npos) << e.what();
  }
}

TEST_F(SwarmRegistryTest, AutoTakesTheLeastServedStage) {
  auto a = peer(0, "tcp://127.0.0.1:1");
  // Stages 1 and 2 have no peer: the lowest of them.
  EXPECT_EQ(a->least_served_stage(), 1);
  auto b = peer(1, "tcp://127.0.0.1:2");
  EXPECT_EQ(a->least_served_stage(), 2);
  auto c = peer(2, "tcp://127.0.0.1:3");
  // Every stage served: by published speed, an unpublished peer counting as the mean.
  a->publish_speed(100);
  b->publish_speed(40);
  c->publish_speed(70);
  EXPECT_EQ(a->least_served_stage(), 1);
  auto d = peer(1, "tcp://127.0.0.1:4");  // unpublished: the mean, 70 → stage 1 holds 110
  EXPECT_EQ(a->least_served_stage(), 2);
}

}  // namespace
}  // namespace strata
