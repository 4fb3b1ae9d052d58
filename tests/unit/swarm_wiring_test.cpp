// SWARM's stochastic wiring (parallel/swarm/stochastic_wiring.h), driven with a clock of its own:
// fixed routing's round-robin and what it skips; balanced routing's share of work by measured
// speed, a backward's cost, where a newcomer and a peer back from a ban enter, bans that end, and
// the stage's throughput.
#include <gtest/gtest.h>

#include <map>
#include <vector>

#include "parallel/swarm/stochastic_wiring.h"

namespace strata {
namespace {

WiringSettings fixed_routing() {
  WiringSettings settings;
  settings.routing = SwarmRouting::fixed;
  return settings;
}

// Balanced routing that takes every measurement (no warm-up left out), as the tests below
// count them.
WiringSettings balanced() {
  WiringSettings settings;
  settings.warmup = 0;
  return settings;
}

// The peer that the `sequence`-th forward of one sample goes to (-1: none).
std::int64_t peer_for(StageWiring& wiring, std::int64_t sequence,
                      const std::vector<std::int64_t>& excluded = {}, double now = 0) {
  const auto choice = wiring.choose(StageWork::forward, 1, sequence, excluded, now);
  return choice ? choice->peer : -1;
}

// How many of `count` forwards of one sample each peer gets, each finishing after the peer's
// seconds per sample in `speeds` (so the wiring keeps measuring them).
std::map<std::int64_t, int> share_of_work(StageWiring& wiring, int count,
                                          const std::map<std::int64_t, double>& speeds) {
  std::map<std::int64_t, int> pieces;
  for (int i = 0; i < count; ++i) {
    const auto choice = wiring.choose(StageWork::forward, 1, i, {}, 0);
    if (!choice) break;
    ++pieces[choice->peer];
    wiring.finished(*choice, speeds.at(choice->peer));
  }
  return pieces;
}

TEST(SwarmWiring, FixedIsRoundRobinInIdOrder) {
  StageWiring wiring(fixed_routing());
  wiring.set_peers({30, 10, 20});
  EXPECT_EQ(wiring.peers(), (std::vector<std::int64_t>{10, 20, 30}));
  std::vector<std::int64_t> chosen;
  for (std::int64_t sequence = 0; sequence < 7; ++sequence)
    chosen.push_back(peer_for(wiring, sequence));
  EXPECT_EQ(chosen, (std::vector<std::int64_t>{10, 20, 30, 10, 20, 30, 10}));
}

TEST(SwarmWiring, FixedSkipsExcludedAndBannedPeersToTheNext) {
  StageWiring wiring(fixed_routing());
  wiring.set_peers({10, 20, 30});
  // Sequence 1 is 20's: tried already, it goes to the next one; the others keep their peers.
  EXPECT_EQ(peer_for(wiring, 1, {20}), 30);
  EXPECT_EQ(peer_for(wiring, 2, {20}), 30);
  EXPECT_EQ(peer_for(wiring, 3, {20}), 10);
  EXPECT_EQ(peer_for(wiring, 2, {20, 30}), 10);  // wraps

  const auto failing = wiring.choose(StageWork::forward, 1, 2, {}, 100);
  ASSERT_TRUE(failing.has_value());
  EXPECT_EQ(failing->peer, 30);
  wiring.failed(*failing, 100);
  EXPECT_TRUE(wiring.banned(30, 100));
  EXPECT_EQ(peer_for(wiring, 2, {}, 101), 10);
  EXPECT_EQ(peer_for(wiring, 1, {}, 101), 20);
}

TEST(SwarmWiring, NoPeerWhenEveryOneIsExcludedOrBanned) {
  for (const SwarmRouting routing : {SwarmRouting::fixed, SwarmRouting::balanced}) {
    WiringSettings settings = balanced();
    settings.routing = routing;
    StageWiring wiring(settings);
    EXPECT_FALSE(wiring.choose(StageWork::forward, 1, 0, {}, 0).has_value());  // no peers yet
    wiring.set_peers({1, 2, 3});
    EXPECT_FALSE(wiring.choose(StageWork::forward, 1, 0, {1, 2, 3}, 0).has_value());
    wiring.failed(WiringChoice{3, 1, 1}, 0);
    EXPECT_FALSE(wiring.choose(StageWork::backward, 4, 5, {1, 2}, 1).has_value());
  }
}

TEST(SwarmWiring, BalancedGivesATwiceSlowerPeerAThirdOfTheWork) {
  StageWiring wiring{balanced()};
  wiring.set_peers({1, 2});
  // Measured once each first, so no piece goes by the first guess of 1 s per unit.
  wiring.finished(WiringChoice{1, 1, 1}, 0.01);
  wiring.finished(WiringChoice{2, 1, 1}, 0.02);
  const auto pieces = share_of_work(wiring, 3000, {{1, 0.01}, {2, 0.02}});
  EXPECT_NEAR(pieces.at(2) / 3000.0, 1.0 / 3, 0.005);
  EXPECT_NEAR(pieces.at(1) / 3000.0, 2.0 / 3, 0.005);
  EXPECT_NEAR(wiring.seconds_per_unit(1), 0.01, 1e-12);
  EXPECT_NEAR(wiring.seconds_per_unit(2), 0.02, 1e-12);
}

TEST(SwarmWiring, BackwardCountsBackwardCostUnitsPerSample) {
  WiringSettings settings = balanced();
  settings.backward_cost = 2.5;
  StageWiring wiring(settings);
  wiring.set_peers({7});
  const auto forward = wiring.choose(StageWork::forward, 4, 0, {}, 0);
  ASSERT_TRUE(forward.has_value());
  EXPECT_DOUBLE_EQ(forward->units, 4);
  wiring.finished(*forward, 2.0);  // 0.5 s per unit, taken whole
  EXPECT_DOUBLE_EQ(wiring.seconds_per_unit(7), 0.5);

  const auto backward = wiring.choose(StageWork::backward, 4, 1, {}, 0);
  ASSERT_TRUE(backward.has_value());
  EXPECT_DOUBLE_EQ(backward->units, 10);
  EXPECT_DOUBLE_EQ(backward->expected_seconds, 5);
  EXPECT_DOUBLE_EQ(wiring.busy(7), 1 * 4 + 5);  // the forward's first guess (1 s/unit), then this
  // A backward as fast per unit as the forward leaves the speed where it was; one twice as slow
  // moves it by the EMA's weight.
  wiring.finished(*backward, 5.0);
  EXPECT_DOUBLE_EQ(wiring.seconds_per_unit(7), 0.5);
  wiring.finished(*backward, 10.0);
  EXPECT_DOUBLE_EQ(wiring.seconds_per_unit(7), 0.75 * 0.5 + 0.25 * 1.0);
}

TEST(SwarmWiring, NewPeerEntersAtTheLeastBusyTime) {
  StageWiring wiring{balanced()};
  wiring.set_peers({1, 2});
  share_of_work(wiring, 200, {{1, 0.01}, {2, 0.01}});
  const double least = std::min(wiring.busy(1), wiring.busy(2));
  EXPECT_GT(least, 0.5);

  wiring.set_peers({1, 2, 3});
  EXPECT_DOUBLE_EQ(wiring.busy(3), least);
  EXPECT_NEAR(wiring.seconds_per_unit(3), 0.01, 1e-12);  // the measured peers' mean
  // Had it entered at 0, the next hundred pieces would all be its; it takes its third.
  const auto pieces = share_of_work(wiring, 90, {{1, 0.01}, {2, 0.01}, {3, 0.01}});
  EXPECT_NEAR(pieces.at(3), 30, 2);
  EXPECT_NEAR(pieces.at(1), 30, 2);

  wiring.set_peers({2, 3});  // 1 left
  EXPECT_EQ(wiring.peers(), (std::vector<std::int64_t>{2, 3}));
  EXPECT_THROW(wiring.busy(1), std::invalid_argument);
}

TEST(SwarmWiring, BannedPeerReturnsAfterBanSecondsAtTheLeastBusyTime) {
  WiringSettings settings = balanced();
  settings.ban_s = 30;
  StageWiring wiring(settings);
  wiring.set_peers({1, 2});
  const auto failing = wiring.choose(StageWork::forward, 1, 0, {}, 0);
  ASSERT_TRUE(failing.has_value());
  wiring.failed(*failing, 10);
  const std::int64_t banned = failing->peer;
  const std::int64_t other = banned == 1 ? 2 : 1;

  for (const double now : {10.0, 25.0, 39.9}) {
    EXPECT_TRUE(wiring.banned(banned, now));
    EXPECT_EQ(wiring.choose(StageWork::forward, 1, 0, {}, now)->peer, other) << now;
  }
  EXPECT_FALSE(wiring.banned(banned, 40));
  // Back at the other's busy time, it shares the work from here rather than taking all of it.
  std::map<std::int64_t, int> pieces;
  for (int i = 0; i < 10; ++i) ++pieces[wiring.choose(StageWork::forward, 1, i, {}, 40)->peer];
  EXPECT_EQ(pieces[banned], 5);
  EXPECT_EQ(pieces[other], 5);
}

TEST(SwarmWiring, ThroughputSumsThePeersSpeedsNotBanned) {
  StageWiring wiring{balanced()};
  EXPECT_DOUBLE_EQ(wiring.throughput(0), 0);
  wiring.set_peers({1, 2, 3});
  EXPECT_DOUBLE_EQ(wiring.throughput(0), 3);    // nothing measured: 1 s per unit each
  wiring.finished(WiringChoice{1, 2, 0}, 1.0);  // 0.5 s per unit
  wiring.finished(WiringChoice{2, 4, 0}, 1.0);  // 0.25
  // 3 is not measured: the mean of 0.5 and 0.25.
  EXPECT_DOUBLE_EQ(wiring.throughput(0), 2 + 4 + 1 / 0.375);
  wiring.failed(WiringChoice{2, 1, 0}, 0);
  EXPECT_DOUBLE_EQ(wiring.throughput(1), 2 + 1 / 0.375);
}

// The default leaves each peer's first measurement out: a first reply 100 times slower (it
// connected and allocated) does not starve that peer of the work that would correct it.
TEST(SwarmWiring, AWarmUpReplyIsLeftOutOfAPeersSpeed) {
  StageWiring wiring{WiringSettings{}};
  wiring.set_peers({1, 2});
  for (int i = 0; i < 2; ++i) {  // each peer's first piece: peer 1's slow
    const auto choice = wiring.choose(StageWork::forward, 1, i, {}, 0);
    ASSERT_TRUE(choice);
    wiring.finished(*choice, choice->peer == 1 ? 1.0 : 0.01);
  }
  const std::map<std::int64_t, int> pieces = share_of_work(wiring, 1000, {{1, 0.01}, {2, 0.01}});
  // Taken whole, the slow reply would have left peer 1 about one piece in a hundred.
  EXPECT_GT(pieces.at(1), 400);
  EXPECT_GT(pieces.at(2), 400);
}

}  // namespace
}  // namespace strata
