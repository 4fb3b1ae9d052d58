// SWARM parallelism (train/swarm/) end to end: peers, each its own `train` process started one by
// one, meet in a file store (at most 4 processes per test). With one peer per stage, routing fixed
// and a target batch of one global batch, the swarm trains the run of Strata's GPipe pipeline of
// the same untied model (unclipped: the stages clip apart): the same loss at every step and the
// same val_loss, to 1e-4; two peers of a stage averaging their rounds train it too. Two drivers
// and two servers account for every sample once. A peer killed mid-forward, mid-backward or
// mid-averaging loses no micro-batch and the swarm finishes; a peer that joins takes its stage's
// state bit for bit. Bad swarm settings are one `error:` line.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <memory>
#include <numeric>
#include <string>
#include <vector>

#include "tests/mpi/layout_runs.h"
#include "tests/support/background_process.h"
#include "tests/support/test_support.h"
#include "train/swarm/stage_requests.h"

namespace strata {
namespace {

namespace fs = std::filesystem;
using testing::Background;
using testing::Layout;
using testing::metric;
using testing::read_file;
using testing::TempDir;

// Every run here: the layout suites' config (4 layers, 20 steps of 16 sequences in micro-batches
// of 2), untied and unclipped.
constexpr const char* kUntied = " --set model.tie_embeddings=false --set optimizer.grad_clip=0";

// A peer of a swarm: its stages, its stage (-1: auto), its run name, more settings, test hooks.
struct Peer {
  std::string stages;
  int stage = 0;
  std::string run;
  std::string extra = "";
  std::string hooks = "";
};

class SwarmRuns : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new TempDir("swarm");
    testing::write_synthetic_dataset(*dir_ / "data", 64, 40000);
    testing::write_layout_config(*dir_, 4);
    Layout gpipe;
    gpipe.schedule = "gpipe";
    gpipe.pp = 3;
    gpipe3_ = testing::train(*dir_, gpipe, "gpipe3",
                             std::string(kUntied) + " --set parallel.pp_layers=[1,2,1]");
    gpipe.pp = 2;
    gpipe2_ = testing::train(*dir_, gpipe, "gpipe2",
                             std::string(kUntied) + " --set parallel.pp_layers=[2,2]");
  }
  static void TearDownTestSuite() {
    delete dir_;
    dir_ = nullptr;
  }

  // The command of `peer` in the swarm of store `store`.
  static std::string command(const std::string& store, const Peer& peer) {
    return (peer.hooks.empty() ? "" : "STRATA_TEST_HOOKS='" + peer.hooks + "' ") +
           testing::bin("train") + " " + dir_->str() + "/config.yaml" + kUntied +
           " --set swarm.join=file://" + dir_->str() + "/store_" + store +
           " --set swarm.stages=" + peer.stages + " --set swarm.stage=" +
           (peer.stage < 0 ? std::string("auto") : std::to_string(peer.stage)) +
           " --set run.name=" + peer.run + " --set threads=1 --set swarm.timeout=2" +
           " --set swarm.request_timeout=2" + peer.extra;
  }
  // Starts `peer` and waits until it serves (so peers started in turn take ids in that order,
  // which fixed routing follows).
  static std::unique_ptr<Background> start(const std::string& store, const Peer& peer) {
    auto process = std::make_unique<Background>(command(store, peer), log(peer.run));
    for (int i = 0; i < 400 && read_file(log(peer.run)).find(" serves stage ") == std::string::npos;
         ++i)
      ::usleep(25000);
    return process;
  }
  // Starts the peers one by one and waits for all; each must succeed.
  static void run_swarm(const std::string& store, const std::vector<Peer>& peers) {
    std::vector<std::unique_ptr<Background>> running;
    for (const Peer& peer : peers) running.push_back(start(store, peer));
    for (auto& p : running) EXPECT_EQ(p->wait(), 0) << p->output();
  }
  // One peer a stage of [1,2,1], each with `extra`, runs <name>_2, <name>_1 and the driver
  // <name>_0, in that order.
  static std::vector<Peer> one_per_stage(const std::string& name, const std::string& extra) {
    const std::string stages = "[1,2,1]";
    return {{stages, 2, name + "_2", extra},
            {stages, 1, name + "_1", extra},
            {stages, 0, name + "_0", extra}};
  }
  static std::string run_dir(const std::string& run) { return dir_->str() + "/runs/" + run; }
  static std::string log(const std::string& run) { return dir_->str() + "/" + run + ".log"; }
  static double sum(const std::vector<double>& values) {
    return std::accumulate(values.begin(), values.end(), 0.0);
  }
  // The driver `run` trained the reference run's losses and val_loss to 1e-4.
  static void expect_reference_run(const std::string& run, const std::string& reference) {
    testing::expect_close(metric(run_dir(run), "loss"), metric(reference, "loss"), 0,
                          run + ": loss per step");
    testing::expect_close(metric(run_dir(run), "val_loss"), metric(reference, "val_loss"), 0,
                          run + ": val_loss");
  }

  // Stage 1 of [1,2,1] has two peers; round-robin sends every forward of the micro-batches to the
  // first and every backward to the second, so `hooks` on one of them kills it mid-forward or
  // mid-backward.
  static void expect_survives(const std::string& store, const std::string& hooks, bool kill_first) {
    const std::string stages = "[1,2,1]", fixed = " --set swarm.routing=fixed";
    std::vector<std::unique_ptr<Background>> peers;
    const std::string victim = store + "_victim";
    peers.push_back(start(store, {stages, 2, store + "_2", fixed}));
    if (!kill_first) peers.push_back(start(store, {stages, 1, store + "_1", fixed}));
    peers.push_back(start(store, {stages, 1, victim, fixed, hooks}));
    if (kill_first) peers.push_back(start(store, {stages, 1, store + "_1", fixed}));
    peers.push_back(start(store, {stages, 0, store + "_0", fixed}));
    int killed = 0;
    for (auto& p : peers) {
      const int status = p->wait();
      if (status == 128 + 9)  // sh's status of a command SIGKILLed
        ++killed;
      else
        EXPECT_EQ(status, 0) << p->output();
    }
    EXPECT_EQ(killed, 1);
  }

  // Peers <store>_1 (with `hooks`), <store>_2a, <store>_2b and the driver <store>_0 of stages
  // [1,2,1], each looking for a better stage every second, started in that order.
  static std::vector<std::unique_ptr<Background>> start_rebalancing(const std::string& store,
                                                                    const std::string& hooks) {
    const std::string stages = "[1,2,1]", looks = " --set swarm.rebalance_every=1";
    std::vector<std::unique_ptr<Background>> peers;
    peers.push_back(start(store, {stages, 1, store + "_1", looks, hooks}));
    for (const char* name : {"_2a", "_2b"})
      peers.push_back(start(store, {stages, 2, store + name, looks}));
    peers.push_back(start(store, {stages, 0, store + "_0", looks}));
    return peers;
  }

  // The payload bytes of 20 steps of 8 micro-batches through stages [1,2,1], B 2, T 16, C 32:
  // per micro-batch a forward to stage 1 (its input out, its output back), the loss at stage 2
  // (its input and the targets out, the input's gradient back) and a backward at stage 1 (input
  // and gradient out, the input's gradient back).
  static double expected_boundary_bytes(SwarmCompression q) {
    const std::size_t array = swarm::boundary_bytes(2 * 16 * 32, q), targets = 2 * 16 * 4;
    return 20.0 * 8 * static_cast<double>(2 * array + (2 * array + targets) + 3 * array);
  }

  static inline TempDir* dir_ = nullptr;
  static inline std::string gpipe3_, gpipe2_;
};

TEST_F(SwarmRuns, OnePeerPerStageTrainsThePipelineRun) {
  // Started one by one, the servers first; the driver (stage 0) finds them in the store.
  run_swarm("one", one_per_stage("one", " --set swarm.routing=fixed"));
  expect_reference_run("one_0", gpipe3_);
  for (const char* server : {"one_1", "one_2"})
    EXPECT_EQ(metric(run_dir(server), "stage").size(), 20u) << server;
  EXPECT_EQ(metric(run_dir("one_0"), "boundary_bytes").back(),
            expected_boundary_bytes(SwarmCompression::none));
}

TEST_F(SwarmRuns, Int8BoundariesTrainThePipelineRunClosely) {
  run_swarm("int8",
            one_per_stage("int8", " --set swarm.routing=fixed --set swarm.compression=int8"));
  // The activations and gradients within 1/254 of their block's largest: the run within 1%.
  const double reference = metric(gpipe3_, "val_loss").back();
  EXPECT_NEAR(metric(run_dir("int8_0"), "val_loss").back(), reference, 0.01 * reference);
  EXPECT_EQ(metric(run_dir("int8_0"), "boundary_bytes").back(),
            expected_boundary_bytes(SwarmCompression::int8));
}

using testing::write_secret_file;

TEST_F(SwarmRuns, TwoPeersOfAStageAverageTheirRoundsIntoThePipelineRun) {
  // Round-robin: the last stage's two peers take every other micro-batch and average each round.
  // The swarm has a secret: its store records signed, its requests signed, its stage's averaging
  // group challenged; the run is the same.
  const std::string stages = "[2,2]",
                    fixed = " --set swarm.routing=fixed --set swarm.secret_file=" +
                            write_secret_file(dir_->str() + "/two.secret",
                                              "the two-peer swarm's secret");
  run_swarm(
      "two",
      {{stages, 1, "two_1a", fixed}, {stages, 1, "two_1b", fixed}, {stages, 0, "two_0", fixed}});
  expect_reference_run("two_0", gpipe2_);
  for (const char* server : {"two_1a", "two_1b"}) {
    EXPECT_EQ(metric(run_dir(server), "held_samples"), std::vector<double>(20, 8.0)) << server;
    EXPECT_EQ(metric(run_dir(server), "members"), std::vector<double>(20, 2.0)) << server;
  }
  // Both hold the same weights after every step.
  EXPECT_EQ(metric(run_dir("two_1a"), "weights_sum"), metric(run_dir("two_1b"), "weights_sum"));
}

TEST_F(SwarmRuns, TwoDriversAndTwoServersCountEverySampleOnce) {
  // The second driver starts once the first drives: it joins stage 0 and takes its state. Each
  // driver keeps three micro-batches in flight.
  const std::string stages = "[2,2]", lanes = " --set swarm.in_flight=3";
  run_swarm("count", {{stages, 1, "count_1a"},
                      {stages, 1, "count_1b"},
                      {stages, 0, "count_0a", lanes},
                      {stages, 0, "count_0b", lanes}});
  // 20 rounds of 16 samples on each stage; the samples each stage's peers held sum to the 320
  // the drivers read, every one once; peers of a stage hold the same weights after each step.
  for (const auto& [a, b] :
       {std::pair{"count_0a", "count_0b"}, std::pair{"count_1a", "count_1b"}}) {
    const std::vector<double> rounds = metric(run_dir(a), "round_samples");
    EXPECT_EQ(rounds, std::vector<double>(20, 16.0)) << a;
    EXPECT_EQ(sum(metric(run_dir(a), "held_samples")) + sum(metric(run_dir(b), "held_samples")),
              320.0)
        << a << ", " << b;
    const std::vector<double> weights_a = metric(run_dir(a), "weights_sum");
    const std::vector<double> weights_b = metric(run_dir(b), "weights_sum");
    ASSERT_GE(weights_b.size(), 2u) << b;
    ASSERT_LE(weights_b.size(), weights_a.size()) << b;
    EXPECT_EQ(weights_b, std::vector<double>(weights_a.end() - static_cast<long>(weights_b.size()),
                                             weights_a.end()))
        << b;
  }
  // Not the pipeline's order of samples, but its run: the same val_loss within 2%.
  const double reference = metric(gpipe2_, "val_loss").back();
  EXPECT_NEAR(metric(run_dir("count_0a"), "val_loss").back(), reference, 0.02 * reference);
}

TEST_F(SwarmRuns, APeerKilledMidForwardOrBackwardLosesNoMicroBatch) {
  for (const bool kill_first : {true, false}) {
    const std::string store = kill_first ? "forward" : "backward";
    expect_survives(store, "kill_in_request=21", kill_first);
    // The driver made every step: the micro-batch the victim held was sent to its other peer.
    const std::string driver = run_dir(store + "_0");
    EXPECT_EQ(metric(driver, "loss").size(), 20u) << store;
    EXPECT_NE(read_file(log(store + "_0")).find("did not answer"), std::string::npos) << store;
    // The survivor made every step; after the death each round is its alone.
    const std::vector<double> members = metric(run_dir(store + "_1"), "members");
    EXPECT_EQ(members.size(), 20u) << store;
    EXPECT_EQ(members.back(), 1.0) << store;
  }
}

TEST_F(SwarmRuns, APeerKilledWhileAveragingIsLeftOutOfTheRound) {
  expect_survives("averaging", "kill_in_averaging=5", false);
  const std::vector<double> members = metric(run_dir("averaging_1"), "members");
  ASSERT_EQ(members.size(), 20u);
  EXPECT_EQ(members[3], 2.0);  // step 4: both
  EXPECT_EQ(members[4], 1.0);  // step 5: averaged again without the dead one
  EXPECT_EQ(metric(run_dir("averaging_0"), "loss").size(), 20u);
}

TEST_F(SwarmRuns, APeerThatJoinsTakesItsStagesStateBitForBit) {
  // A slow server (each request at least 30 ms) keeps the run long enough to join it.
  const std::string stages = "[2,2]", fixed = " --set swarm.routing=fixed";
  auto first = start("join", {stages, 1, "join_1a", fixed, "step_seconds=0.03"});
  auto driver = start("join", {stages, 0, "join_0", fixed});
  for (int i = 0; i < 400 && metric(run_dir("join_0"), "loss").size() < 4; ++i) ::usleep(25000);
  auto joiner = start("join", {stages, 1, "join_1b", fixed, "step_seconds=0.03"});
  for (auto* p : {driver.get(), first.get(), joiner.get()}) EXPECT_EQ(p->wait(), 0) << p->output();
  EXPECT_NE(read_file(log("join_1b")).find("joined at round"), std::string::npos)
      << read_file(log("join_1b"));
  const std::vector<double> mine = metric(run_dir("join_1b"), "weights_sum");
  const std::vector<double> theirs = metric(run_dir("join_1a"), "weights_sum");
  ASSERT_GE(mine.size(), 2u);
  // From the round it joined at on, the joiner holds the first peer's weights bit for bit.
  EXPECT_EQ(mine, std::vector<double>(theirs.end() - static_cast<long>(mine.size()), theirs.end()));
  EXPECT_EQ(metric(run_dir("join_0"), "loss").size(), 20u);
}

TEST_F(SwarmRuns, ARestartedSwarmGoesOnBitForBitAndAssemblesIntoOneCheckpoint) {
  const std::string fixed = " --set swarm.routing=fixed";
  run_swarm("whole", one_per_stage("whole", fixed));
  // Stopped after step 10 (every stage checkpoints it), then resumed in a new store.
  run_swarm("part", one_per_stage("part", fixed + " --set train.stop_after=10"));
  for (const char* run : {"part_0", "part_1", "part_2"}) {
    ASSERT_TRUE(fs::exists(run_dir(run) + "/checkpoints/step_00000010.h5")) << run;
    fs::remove(log(run));  // start() waits for the resumed peer's own line
  }
  run_swarm("part_resumed", one_per_stage("part", fixed + " --resume"));
  EXPECT_NE(read_file(log("part_1")).find("goes on from its checkpoint at step 10"),
            std::string::npos)
      << read_file(log("part_1"));
  // The same losses at every step, and every stage's final state bit for bit.
  EXPECT_EQ(metric(run_dir("part_0"), "loss"), metric(run_dir("whole_0"), "loss"));
  EXPECT_EQ(metric(run_dir("part_0"), "val_loss"), metric(run_dir("whole_0"), "val_loss"));
  for (const char* k : {"0", "1", "2"}) {
    const std::string file = "/checkpoints/step_00000020.h5";
    const testing::CommandResult diff =
        testing::run_command(testing::bin("ckpt") + " diff " + run_dir(std::string("whole_") + k) +
                             file + " " + run_dir(std::string("part_") + k) + file);
    EXPECT_EQ(diff.status, 0) << diff.output;
  }
  // One whole checkpoint of the stages, which eval reads: the pipeline run's val_loss to 1e-4.
  const std::string assembled = dir_->str() + "/assembled";
  const testing::CommandResult assemble = testing::run_command(
      testing::bin("ckpt") + " swarm-assemble " + assembled + " " + run_dir("whole_0") + " " +
      run_dir("whole_1") + " " + run_dir("whole_2") + "/checkpoints/step_00000020.h5");
  ASSERT_EQ(assemble.status, 0) << assemble.output;
  EXPECT_NE(assemble.output.find("stage 1: step 20"), std::string::npos) << assemble.output;
  const auto val_loss = [&](const std::string& checkpoint) {
    const testing::CommandResult eval =
        testing::run_command(testing::bin("eval") + " --checkpoint " + checkpoint + " --data " +
                             dir_->str() + "/data/val --tokens 1024");
    EXPECT_EQ(eval.status, 0) << eval.output;
    const std::size_t at = eval.output.find("val_loss ");
    return at == std::string::npos ? -1.0 : std::stod(eval.output.substr(at + 9));
  };
  const double swarm = val_loss(assembled + "/step_00000020.h5");
  const double pipeline = val_loss(gpipe3_ + "/checkpoints/step_00000020.h5");
  EXPECT_NEAR(swarm, pipeline, 1e-4 * pipeline);
  // A stage's checkpoint alone is not a model.
  testing::expect_one_error_line(testing::bin("eval") + " --checkpoint " + run_dir("whole_1") +
                                     "/checkpoints/step_00000020.h5 --data " + dir_->str() +
                                     "/data/val",
                                 "ckpt swarm-assemble");
  // Nor is a missing stage assembled.
  testing::expect_one_error_line(testing::bin("ckpt") + " swarm-assemble " + assembled + "_2 " +
                                     run_dir("whole_0") + " " + run_dir("whole_2"),
                                 "no checkpoint of stage 1");
}

TEST_F(SwarmRuns, ARebalancedSwarmMovesAPeerToItsBottleneck) {
  // Stage 1's one peer takes at least 100 ms a request (a step of 8 micro-batches, a forward
  // and a backward each, at least 1.6 s); stage 2 has two fast peers. Within a few rebalancing
  // looks (one a second) stage 2's newest peer moves to stage 1, which the driver's wiring then
  // prefers: the steps get faster.
  for (auto& p : start_rebalancing("rebalance", "step_seconds=0.1"))
    EXPECT_EQ(p->wait(), 0) << p->output();
  const std::string moved = read_file(log("rebalance_2b"));
  EXPECT_NE(moved.find("moves from stage 2"), std::string::npos) << moved;
  EXPECT_EQ(metric(run_dir("rebalance_2b"), "moves").back(), 1.0);
  EXPECT_EQ(metric(run_dir("rebalance_2b"), "stage").back(), 1.0);
  // It took stage 1's state (or, on a loaded machine, came before stage 1's first step and started
  // from the seed as its peer did): the two end with the same weights.
  EXPECT_EQ(metric(run_dir("rebalance_2b"), "weights_sum").back(),
            metric(run_dir("rebalance_1"), "weights_sum").back());
  // Every step of stage 1 averaged a whole round, whichever peers held it.
  EXPECT_EQ(metric(run_dir("rebalance_1"), "round_samples"), std::vector<double>(20, 16.0));
  // The last steps at least twice as fast as the first, all of whose stage-1 work was throttled.
  const std::vector<double> step_ms = metric(run_dir("rebalance_0"), "step_ms");
  ASSERT_EQ(step_ms.size(), 20u);
  const double before = step_ms[0];
  const double after = (step_ms[15] + step_ms[16] + step_ms[17] + step_ms[18] + step_ms[19]) / 5;
  EXPECT_LT(after, before / 2) << "before " << before << " ms, after " << after << " ms";
}

TEST_F(SwarmRuns, AStageThatLostItsLastPeerGetsOneThatMoves) {
  // Stage 1's only peer dies at its 30th request; the driver waits, and stage 2's newest peer
  // moves there (its state lost with the dead peer: it goes on from the seed's weights).
  const auto peers = start_rebalancing("orphan", "kill_in_request=30");
  EXPECT_EQ(peers[0]->wait(), 128 + 9);
  for (std::size_t i = 1; i < peers.size(); ++i)
    EXPECT_EQ(peers[i]->wait(), 0) << peers[i]->output();
  // The driver saw the death; while stage 1 had no live peer (unless the move came before the
  // dead peer was declared dead) it waited, and said so both ways.
  const std::string driver = read_file(log("orphan_0"));
  EXPECT_NE(driver.find("did not answer"), std::string::npos) << driver;
  EXPECT_EQ(driver.find("stage 1 has no live peer; the pipeline waits") == std::string::npos,
            driver.find("stage 1 has a peer again") == std::string::npos)
      << driver;
  EXPECT_NE(read_file(log("orphan_2b")).find("to stage 1"), std::string::npos)
      << read_file(log("orphan_2b"));
  EXPECT_EQ(metric(run_dir("orphan_0"), "loss").size(), 20u);
}

TEST_F(SwarmRuns, BadSwarmsAreOneErrorLine) {
  const auto expect_error = testing::expect_one_error_line;
  const std::string stages = "[1,2,1]";
  // A tied model cannot be split into stages that step apart.
  expect_error(command("bad", {stages, 0, "tied", " --set model.tie_embeddings=true"}),
               "model.tie_embeddings");
  expect_error(command("bad", {"[1,2]", 0, "stages"}), "swarm.stages");
  expect_error(command("bad", {stages, 3, "stage"}), "swarm.stage");
  expect_error(testing::mpirun(2) + command("bad", {stages, 0, "two_ranks"}), "one process");
  // The swarm's first peer sets its settings; a peer of another optimizer is refused.
  Background server(command("settings", {stages, 1, "settings_first"}), log("settings_first"));
  for (int i = 0;
       i < 200 && read_file(log("settings_first")).find("serves stage") == std::string::npos; ++i)
    ::usleep(50000);
  expect_error(command("settings", {stages, 2, "settings_second", " --set optimizer.lr=1e-2"}),
               "optimizer.lr is 0.01 here but 0.003 in the swarm");
  // A swarm without a secret refuses a peer with one; one with a secret, a peer without it.
  const std::string secret = " --set swarm.secret_file=" +
                             write_secret_file(dir_->str() + "/bad.secret", "a secret 16+ bytes");
  expect_error(command("settings", {stages, 2, "with_secret", secret}),
               "its settings are not signed with this member's secret");
  Background guarded(command("guarded", {stages, 1, "guarded_first", secret}),
                     log("guarded_first"));
  for (int i = 0;
       i < 200 && read_file(log("guarded_first")).find("serves stage") == std::string::npos; ++i)
    ::usleep(50000);
  expect_error(command("guarded", {stages, 2, "no_secret"}), "the group is authenticated");
}

}  // namespace
}  // namespace strata
